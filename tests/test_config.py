from __future__ import annotations

import re

import pytest

from scopemem.config import MemoryConfig, config_from_mapping, load_config
from scopemem.errors import ConfigError


def test_defaults_leave_memory_off():
    config = config_from_mapping({})
    assert config == MemoryConfig()
    assert config.enabled is False and config.limit == 32 and config.max_tokens == 3000
    assert config.repo_window == 24 and config.max_records_per_scope == 500
    assert config.no_reflect_agents == ("review", "ship") and config.admins == ()


def test_a_full_file_loads(tmp_path):
    path = tmp_path / "scopemem.toml"
    path.write_text('''
[memory]
enabled = true
organization = "acme"
store = "memory"
model = "openai/gpt-4o-mini"
limit = 10
admins = ["user:slack:U0001"]

[memory.stores.sqlite]
path = "./data"
''')
    config = load_config(path)
    assert config.enabled and config.organization == "acme" and config.limit == 10
    assert config.admins == ("user:slack:U0001",)
    assert config.store_options("sqlite") == {"path": "./data"}
    assert config.store_options("worker") == {}


@pytest.mark.parametrize(("table", "key"), [
    ({"limit": "32"}, "memory.limit"),
    ({"limit": True}, "memory.limit"),
    ({"enabled": "yes"}, "memory.enabled"),
    ({"admins": "user:x"}, "memory.admins"),
    ({"stores": {"sqlite": 5}}, "memory.stores"),
    ({"limti": 5}, "limti"),
    ({"limit": 0}, "memory.limit"),
    ({"limit": 51}, "memory.limit"),
    ({"max_tokens": 0}, "memory.max_tokens"),
    ({"max_tokens": 255}, "memory.max_tokens: must be at least 256"),
    ({"repo_window": -1}, "memory.repo_window"),
    ({"enabled": True}, "memory.organization"),
    ({"organization": "a b"}, "memory.organization"),
    ({"organization": "acme\u200b"}, "memory.organization: must not contain invisible"),
    ({"organization": "\u202eemca"}, "memory.organization: must not contain invisible"),
    ({"model": "gpt-4o"}, "memory.model"),
    ({"languages": "english"}, "memory.languages"),
    ({"languages": ["klingon"]}, "memory.languages: unknown language 'klingon'"),
    ({"languages": []}, "memory.languages: name at least one"),
    ({"ranking": "bm25"}, "memory.ranking: must be one of weighted, seed"),
    ({"min_match": 1.5}, "memory.min_match: must be from 0 to 1"),
    ({"min_match": "0.2"}, "memory.min_match"),
    ({"min_match": True}, "memory.min_match"),
    ({"retention_days": -1}, "memory.retention_days: must be from 0 to 36500"),
    ({"retention_days": 36_501}, "memory.retention_days"),
    ({"retention_days": "30"}, "memory.retention_days"),
    ({"min_records_per_scope": 0}, "memory.min_records_per_scope: must be from 1 to 10000"),
    ({"min_records_per_scope": 2.5}, "memory.min_records_per_scope"),
])
def test_mistakes_name_the_key(table, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config_from_mapping({"memory": table})


def test_retention_and_the_cap_floor_have_defaults_and_the_floor_never_tops_the_cap():
    config = config_from_mapping({"memory": {}})
    assert (config.retention_days, config.min_records_per_scope, config.cap_floor()) == (
        30, 100, 100)
    config = config_from_mapping({"memory": {"retention_days": 0, "max_records_per_scope": 40}})
    assert (config.retention_days, config.cap_floor()) == (0, 40)
    config = config_from_mapping({"memory": {"min_records_per_scope": 7}})
    assert config.cap_floor() == 7


def test_the_retention_reaches_the_built_store(tmp_path):
    from scopemem.installation import build_store
    from scopemem.plugins.manager import new_plugin_manager

    config = config_from_mapping({"memory": {
        "enabled": True, "organization": "acme", "retention_days": 4, "stores": {
        "sqlite": {"path": str(tmp_path / "data")}}}})
    store = build_store(config, new_plugin_manager(environ={}))
    assert store.retention_days == 4


def test_max_tokens_may_sit_at_its_floor():
    assert config_from_mapping({"memory": {"max_tokens": 256}}).max_tokens == 256


def test_unknown_top_level_key():
    with pytest.raises(ConfigError, match="unknown top-level key 'memroy'"):
        config_from_mapping({"memroy": {}})


@pytest.mark.parametrize("value", [0, -5, 2.5, "500", float("nan"), True])
def test_bad_scope_cap_warns_and_the_default_governs(value, memory_warnings):
    config = config_from_mapping({"memory": {"max_records_per_scope": value}})
    assert config.max_records_per_scope == 500
    [warning] = memory_warnings()
    assert "memory.max_records_per_scope" in warning and "500" in warning


@pytest.mark.parametrize("value", [10_001, 50_000])
def test_a_scope_cap_above_the_most_is_clamped_to_it(value, memory_warnings):
    config = config_from_mapping({"memory": {"max_records_per_scope": value}})
    assert config.max_records_per_scope == 10_000
    [warning] = memory_warnings()
    assert "memory.max_records_per_scope" in warning and "from 1 to 10000" in warning
    assert "clamped to 10000" in warning


def test_the_hooks_character_budget_is_checked():
    assert config_from_mapping({}).hooks.max_chars == 9000
    assert config_from_mapping({"memory": {"hooks": {"max_chars": 1024}}}).hooks.max_chars == 1024
    for value in (1023, 0, -1):
        with pytest.raises(ConfigError, match=r"memory\.hooks\.max_chars: must be at least 1024"):
            config_from_mapping({"memory": {"hooks": {"max_chars": value}}})
    with pytest.raises(ConfigError, match=r"memory\.hooks\.max_chars"):
        config_from_mapping({"memory": {"hooks": {"max_chars": "9000"}}})


def test_good_scope_cap_is_used(memory_warnings):
    assert config_from_mapping({"memory": {"max_records_per_scope": 10_000}}
                               ).max_records_per_scope == 10_000
    assert memory_warnings() == []


def test_file_errors_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[memory\n")
    with pytest.raises(ConfigError, match="broken.toml"):
        load_config(broken)


def malformed_files(tmp_path):
    """Three files no TOML parser should answer with a traceback."""
    latin = tmp_path / "latin1.toml"
    latin.write_bytes(b'[memory]\norganization = "caf\xe9"\n')
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    return {"not UTF-8 text (byte 0xe9 on line 2)": latin,
            "nested too deeply": deep,
            "larger than 1 MiB": "/dev/zero"}


def test_a_malformed_file_is_one_config_error(tmp_path):
    for message, path in malformed_files(tmp_path).items():
        with pytest.raises(ConfigError, match=re.escape(message)) as caught:
            load_config(path)
        assert "\n" not in str(caught.value) and str(path) in str(caught.value)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_default_search(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCOPEMEM_CONFIG", raising=False)
    assert load_config() == MemoryConfig()
    (tmp_path / "scopemem.toml").write_text("[memory]\nlimit = 7\n")
    assert load_config().limit == 7
    other = tmp_path / "other.toml"
    other.write_text("[memory]\nlimit = 9\n")
    monkeypatch.setenv("SCOPEMEM_CONFIG", str(other))
    assert load_config().limit == 9


def test_the_ranking_settings_build_the_ranking():
    from scopemem.core.ranking import SEED

    config = config_from_mapping({"memory": {"languages": ["german", "english"],
                                             "min_match": 0}})
    ranking = config.ranking_spec()
    assert ranking.weighted and ranking.analyzer.languages == ("german", "english")
    # Every listed language of a script stems it: German reduces "hauser", English
    # "deploying".
    assert "haus" in ranking.analyzer.stems("hauser")
    assert "deploy" in ranking.analyzer.stems("deploying")
    assert "und" in ranking.analyzer.stopwords and "the" in ranking.analyzer.stopwords
    assert config_from_mapping({"memory": {"ranking": "seed"}}).ranking_spec() == SEED
    assert config_from_mapping({"memory": {"ranking": "seed", "languages": []}}).ranking_spec() \
        == SEED


def test_the_mcp_table_names_the_servers_identity_and_refuses_mistakes():
    from scopemem.config import McpSettings

    assert MemoryConfig().mcp == McpSettings(subject="local", visibility="dm")
    config = config_from_mapping({"memory": {"mcp": {"subject": "alice", "repo": "acme/api",
                                                     "channel": "slack:C1"}}})
    assert (config.mcp.subject, config.mcp.repo, config.mcp.channel) == (
        "alice", "acme/api", "slack:C1")
    for table, message in (
            ({"subjet": "alice"}, "memory.mcp: unknown key(s): subjet"),
            ({"subject": "two words"}, "memory.mcp.subject: must not contain whitespace"),
            ({"subject": ""}, "memory.mcp.subject: must not be empty"),
            # The server started, and every tool answered "the caller must be a user scope
            # key such as user:slack:U0123".
            ({"subject": "alice:"}, "memory.mcp.subject: must not end with a colon"),
            ({"subject": "user:mcp:alice"}, "memory.mcp.subject: takes the name, not the "
                                            'user scope\'s key: subject = "alice"'),
            ({"repo": 7}, "memory.mcp.repo"),
            ({"visibility": "everyone"}, "memory.mcp.visibility: must be one of"),
            # Each made a channel scope no chat run reads (``channel:slack:`` shared by
            # every such server; ``channel:channel:slack:C1``), accepted without a word.
            ({"channel": "slack:"}, "memory.mcp.channel: 'slack:' is empty after its "
                                    "namespace"),
            ({"channel": "channel:slack:C1"}, "memory.mcp.channel: takes the platform id, "
                                              "not the channel scope's key: channel = "
                                              '"slack:C1"'),
            ("alice", "memory.mcp must be a table")):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            config_from_mapping({"memory": {"mcp": table}})
