"""A store package's docstring names its modules, one job each: the table a newcomer reads
first must list every module the package has, and no module it does not."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

PACKAGES = ["scopemem.stores.sqlite", "scopemem.stores.sqlite_shared", "scopemem.stores.postgres",
            "scopemem.stores.shared"]


@pytest.mark.parametrize("name", PACKAGES)
def test_a_store_package_lists_exactly_its_modules(name: str):
    package = importlib.import_module(name)
    assert package.__file__ is not None and package.__doc__ is not None
    folder = Path(package.__file__).parent
    present = {path.stem for path in folder.glob("*.py") if path.stem != "__init__"}
    # Rows of the module table: a double-backquoted name at the start of a line.
    listed = set(re.findall(r"^``(\w+)``\s", package.__doc__, re.MULTILINE))
    assert listed == present, (f"listed but missing: {sorted(listed - present)}; "
                               f"present but not listed: {sorted(present - listed)}")
