"""The docs tell the truth: every example in docs/ marked runnable runs as written.

An example is marked by an ``<!-- runnable -->`` line just before its fence (```` ```python ````
or ```` ```sh ````). Each runs in a fresh folder holding the ``scopemem.toml`` below (memory on,
organization ``acme``, the embedded SQLite store in ``./scopemem-data``, one admin), with this
environment's ``scopemem`` first on ``PATH`` and ``.venv/bin/`` standing for its folder, as in
the README's walkthrough test. An example must exit 0.

Installation commands are checked as read, not run: every ``pip install`` in the docs and the
README installs from the checkout (scopemem is on no package index) and names only extras
that pyproject.toml defines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
CONFIG = """\
[memory]
enabled = true
organization = "acme"
store = "sqlite"
admins = ["user:slack:U0001"]

[memory.stores.sqlite]
path = "./scopemem-data"
"""
_RUNNABLE = re.compile(r"^[ \t]*<!-- runnable -->\n([ \t]*)```(python|sh)\n(.*?)^\1```",
                       re.MULTILINE | re.DOTALL)


def runnable_examples() -> list[tuple[str, str, str]]:
    found = []
    for doc in DOCS:
        for number, match in enumerate(_RUNNABLE.finditer(doc.read_text()), 1):
            indent, language, body = match.groups()
            body = "".join(line[len(indent):] if line.startswith(indent) else line
                           for line in body.splitlines(keepends=True))
            found.append((f"{doc.name}#{number}", language, body))
    return found


EXAMPLES = runnable_examples()


def test_the_docs_mark_examples_to_run():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize(("language", "body"), [(lang, body) for _, lang, body in EXAMPLES],
                         ids=[name for name, _, _ in EXAMPLES])
def test_a_runnable_example_runs(tmp_path: Path, language: str, body: str):
    (tmp_path / "scopemem.toml").write_text(CONFIG)
    bin_dir = str(Path(sys.executable).parent)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SCOPEMEM_")}
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    if language == "python":
        command = [sys.executable, "-c", body]
    else:
        command = ["bash", "-euo", "pipefail", "-c", body.replace(".venv/bin/", bin_dir + "/")]
    completed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=120, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_every_pip_install_in_the_docs_installs_from_the_checkout_with_real_extras():
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["project"]["optional-dependencies"])
    commands = [(path.name, line) for path in [ROOT / "README.md", *DOCS]
                for line in path.read_text().splitlines() if "pip install" in line]
    assert commands
    for name, line in commands:
        assert "scopemem[" not in line, f"{name}: scopemem is on no index: {line}"
        for named in re.findall(r"\.\[([\w,-]+)\]", line):
            assert set(named.split(",")) <= extras, f"{name}: unknown extra in {line}"


#: The store guides say what an operator needs (options, durability, disk, errors, migration);
#: design lives in docs/storage.md and dated figures in CHANGELOG.md.
STORE_GUIDES = ["sqlite-store.md", "postgres-store.md"]
MAX_GUIDE_LINES = 260


@pytest.mark.parametrize("name", STORE_GUIDES)
def test_a_store_guide_stays_a_guide(name: str) -> None:
    lines = (ROOT / "docs" / name).read_text().splitlines()
    assert len(lines) <= MAX_GUIDE_LINES, (
        f"docs/{name} has {len(lines)} lines, over {MAX_GUIDE_LINES}: move design to"
        " docs/storage.md and dated figures to CHANGELOG.md")


_LINK = re.compile(r"\]\(((?:docs/)?[\w.-]+\.md)#([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, punctuation but ``-`` and
    ``_`` dropped, spaces made ``-``."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in path.read_text().splitlines() if line.startswith("#")}


def test_every_link_to_a_section_of_a_doc_finds_it() -> None:
    for source in [ROOT / "README.md", *DOCS]:
        for target, anchor in _LINK.findall(source.read_text()):
            path = (source.parent / target).resolve()
            assert path.exists(), f"{source.name}: {target} does not exist"
            assert anchor in _anchors(path), f"{source.name}: no section #{anchor} in {target}"
