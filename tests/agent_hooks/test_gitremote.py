"""The repo scope from the working directory's git remote: a real repository, every common
URL form, and no scope (never a guess) without one."""

from __future__ import annotations

from pathlib import Path

import pytest

from scopemem.gitremote import (
    _origin_from_files,
    origin_from_config,
    repo_from_url,
    repo_of,
)
from tests.agent_hooks.claude_code import git_repo


@pytest.mark.parametrize(("url", "repo"), [
    ("git@github.com:acme/api.git", "acme/api"),
    ("git@github.com:acme/api", "acme/api"),
    ("https://github.com/acme/api.git", "acme/api"),
    ("https://github.com/acme/api/", "acme/api"),
    ("ssh://git@github.com/acme/api.git", "acme/api"),
    ("ssh://git@github.com:2222/acme/api.git", "acme/api"),
    ("https://x-access-token:ghp_secret@github.com/acme/api.git", "acme/api"),
    ("git@gitlab.com:group/sub/api.git", "group/sub/api"),
    ("/srv/git/api.git", None),
    ("file:///srv/git/acme/api.git", None),
    ("../api", None),
    ("https://github.com/api.git", None),
    ("git@github.com:acme/../api.git", None),
    ("", None),
])
def test_remote_urls_normalise_to_owner_and_name(url: str, repo: str | None) -> None:
    assert repo_from_url(url) == repo


def test_a_real_repository_with_an_ssh_origin(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "api")
    assert repo_of(str(repo), timeout=5) == "acme/api"
    (repo / "src" / "deep").mkdir(parents=True)
    assert repo_of(str(repo / "src" / "deep"), timeout=5) == "acme/api"


def test_https_and_ssh_clones_share_the_scope(tmp_path: Path) -> None:
    ssh = git_repo(tmp_path / "a")
    https = git_repo(tmp_path / "b", "https://github.com/acme/api.git")
    assert repo_of(str(ssh), 5) == repo_of(str(https), 5) == "acme/api"


def test_no_remote_or_no_repository_is_no_repo_scope(tmp_path: Path) -> None:
    assert repo_of(str(git_repo(tmp_path / "bare", remote=None)), 5) is None
    (tmp_path / "plain").mkdir()
    assert repo_of(str(tmp_path / "plain"), 5) is None
    assert repo_of(str(tmp_path / "missing"), 5) is None
    assert repo_of(None, 5) is None


def test_the_config_file_is_read_without_a_git_binary(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "api")
    (repo / "src").mkdir()
    assert _origin_from_files(repo / "src") == "git@github.com:acme/api.git"


def test_config_parsing_keeps_to_the_origin_section() -> None:
    text = ('[core]\n\turl = nope\n[remote "upstream"]\n\turl = git@github.com:up/api.git\n'
            '[remote "origin"]\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n'
            '\turl = git@github.com:acme/api.git\n[branch "main"]\n\turl = other\n')
    assert origin_from_config(text) == "git@github.com:acme/api.git"
    assert origin_from_config("[core]\n\tbare = false\n") is None
