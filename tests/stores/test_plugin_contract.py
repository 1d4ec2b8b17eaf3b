"""A third-party store runs the contract suite by its registered name (docs/plugins.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_store_plugin_joins_the_contract_suite_by_name():
    """The built-in ``memory`` store, taken by name through the plugin registry as a
    third-party store would be, with its (empty) options table."""
    env = {**os.environ, "SCOPEMEM_TEST_STORE_PLUGIN": "memory",
           "SCOPEMEM_TEST_STORE_OPTIONS": "{}"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:randomly", "-p",
         "no:cacheprovider", "tests/stores/test_contract.py", "-k",
         "plugin and (mints_namespaced_ids or empty_batch)", "-rA"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASSED tests/stores/test_contract.py::test_empty_batch_is_a_no_op[plugin:memory]" \
        in done.stdout
