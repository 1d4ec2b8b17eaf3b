"""The repository a coding session works in, from its working directory's git remote.

The repo scope is ``repo:<owner>/<name>``: the path of ``remote.origin.url`` without host,
user, credentials, port or ``.git``, so the ssh and https clones of one repository share a
scope. ``git config --get remote.origin.url`` answers first (it knows worktrees and
includes); without a git binary the repository's ``config`` file is read directly. No git
repository, no origin, or a URL with no owner/name path: no repo scope, never a guess.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from scopemem.core.scopes import scope_key_problem

MAX_CONFIG_BYTES = 1024 * 1024
# scp-like ssh syntax: [user@]host:path, where the host part has no slash.
_SCP_LIKE = re.compile(r"^(?:[^@/\s]+@)?(?P<host>[^:/\s]+):(?P<path>(?!//).+)$")
_SECTION = re.compile(r'^\s*\[\s*remote\s+"origin"\s*\]\s*(?P<rest>.*)$')
_ANY_SECTION = re.compile(r"^\s*\[")
_URL_KEY = re.compile(r"^\s*url\s*=\s*(?P<value>.*?)\s*$", re.IGNORECASE)


def repo_from_url(url: str) -> str | None:
    """``owner/name`` (or ``group/sub/name``) of a git remote URL, or None."""
    url = url.strip()
    if not url:
        return None
    path: str
    if "://" in url:
        parts = urlsplit(url)
        if parts.scheme in ("file", ""):
            return None
        path = parts.path
    else:
        match = _SCP_LIKE.match(url)
        if match is None:
            return None  # a local path remote: no shared repository to name
        path = match.group("path")
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")]
    segments = [segment for segment in path.split("/") if segment]
    if len(segments) < 2 or any(segment in (".", "..") for segment in segments):
        return None
    repo = "/".join(segments)
    return repo if scope_key_problem(f"repo:{repo}") is None else None


def typed_repo(value: str) -> tuple[bool, str | None]:
    """Whether ``value``, a repository a person typed (``--repo``, ``memory.mcp.repo``), is
    ``owner/name`` as a clone's remote names it, and the ``owner/name`` it stands for when
    it is not but names one (a URL, a ``.git`` suffix). A URL or a bare name would make a
    scope no run reads."""
    # A URL or an scp-like remote as given; a path as the path of some remote.
    named = repo_from_url(value if ":" in value else f"https://host.invalid/{value}")
    return named == value, named


def _git_dir(start: Path) -> Path | None:
    """The git directory of the repository ``start`` is in (a worktree's ``.git`` file
    points to it), or None."""
    for directory in (start, *start.parents):
        dot_git = directory / ".git"
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():
            text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
            if text.startswith("gitdir:"):
                target = Path(text[len("gitdir:"):].strip())
                return target if target.is_absolute() else directory / target
            return None
    return None


def _common_dir(git_dir: Path) -> Path:
    """Where a linked worktree keeps the shared config (its ``commondir``)."""
    common = git_dir / "commondir"
    if common.is_file():
        target = Path(common.read_text(encoding="utf-8", errors="replace").strip())
        return target if target.is_absolute() else git_dir / target
    return git_dir


def origin_from_config(text: str) -> str | None:
    """``remote.origin.url`` from the text of a git ``config`` file (the last one wins, as in
    git), or None."""
    url = None
    in_origin = False
    for line in text.splitlines():
        section = _SECTION.match(line)
        if section is not None:
            in_origin = True
            line = section.group("rest")
        elif _ANY_SECTION.match(line):
            in_origin = False
            continue
        if in_origin:
            found = _URL_KEY.match(line)
            if found is not None:
                url = found.group("value").strip('"')
    return url


def origin_url(cwd: str, timeout: float) -> str | None:
    """``remote.origin.url`` of the repository at ``cwd``: git's answer, else the config
    file's. ``timeout`` bounds the git call (a hook has a deadline)."""
    try:
        done = subprocess.run(["git", "-C", cwd, "config", "--get", "remote.origin.url"],
                              capture_output=True, text=True, timeout=max(timeout, 0.05),
                              check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return _origin_from_files(Path(cwd))
    except (subprocess.TimeoutExpired, OSError):
        return None
    if done.returncode != 0:  # 1: no such key; 128: not a repository
        return None
    return done.stdout.strip() or None


def _origin_from_files(cwd: Path) -> str | None:
    git_dir = _git_dir(cwd)
    if git_dir is None:
        return None
    config = _common_dir(git_dir) / "config"
    try:
        with config.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES)
    except OSError:
        return None
    return origin_from_config(data.decode("utf-8", errors="replace"))


def repo_of(cwd: str | None, timeout: float) -> str | None:
    """The repo scope's ``owner/name`` for a working directory, or None."""
    if not cwd or not Path(cwd).is_dir():
        return None
    url = origin_url(cwd, timeout)
    return repo_from_url(url) if url else None
