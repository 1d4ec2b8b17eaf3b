"""The ``scopemem`` command line: the click root (``root``) and the built-in command
plugins, each a module here registering its commands through ``scopemem_register_commands``.
"""

from scopemem.cli.root import CliState, build_cli, echo_json, main

__all__ = ["CliState", "build_cli", "echo_json", "main"]
