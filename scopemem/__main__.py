"""``python -m scopemem``: the same command line as the ``scopemem`` script."""

from scopemem.cli import main

main()
