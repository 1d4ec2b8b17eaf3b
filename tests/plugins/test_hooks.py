"""The plugin host: specs, built-ins, entry points, environment switches, registries."""

from __future__ import annotations

import importlib.metadata
import inspect
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scopemem import Candidate, Kind, MemoryConfig, Request, ScopeKind, hookimpl
from scopemem.api.memory import Memory
from scopemem.core.policy import RunActor, WriteDecision
from scopemem.errors import PluginError, StoreError
from scopemem.installation import store_registry
from scopemem.plugins import hookspecs, host
from scopemem.plugins.embedders import embedder_registry
from scopemem.plugins.manager import (
    BUILTIN_PLUGINS,
    get_plugin_manager,
    new_plugin_manager,
    plugin_rows,
)
from scopemem.plugins.providers import provider_registry
from scopemem.plugins.registry import Registry
from scopemem.stores.memory import InMemoryStore

ROOT = Path(__file__).resolve().parents[2]
HOOK_NAMES = sorted(name for name in dir(hookspecs) if name.startswith("scopemem_"))
BUILTIN_STORES = {"null", "memory", "sqlite", "worker"}


def test_every_hook_documents_each_argument():
    assert HOOK_NAMES, "no hooks found"
    for name in HOOK_NAMES:
        spec = getattr(hookspecs, name)
        doc = inspect.getdoc(spec) or ""
        for argument in inspect.signature(spec).parameters:
            assert f":param {argument}:" in doc, f"{name} does not document {argument}"
        assert "Called" in doc, f"{name} does not say who calls it"


def test_every_hook_is_in_the_plugin_docs_with_its_signature():
    docs = (ROOT / "docs" / "plugins.md").read_text()
    for name in HOOK_NAMES:
        arguments = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
        assert f"{name}({arguments})" in docs, name


def test_every_hook_has_a_test():
    tests = "\n".join(path.read_text() for path in (ROOT / "tests").rglob("test_*.py")
                      if path.name != "test_hooks.py")
    tests += (ROOT / "tests" / "plugins" / "test_hooks.py").read_text().split(
        "# --- hook tests", 1)[1]
    for name in HOOK_NAMES:
        assert re.search(rf"\b{name}\b", tests), f"no test exercises {name}"


def test_only_authorize_write_is_firstresult():
    pm = new_plugin_manager(load_entry_points=False)
    firstresult = {name for name in HOOK_NAMES
                   if getattr(pm.hook, name).spec.opts.get("firstresult")}
    assert firstresult == {"scopemem_authorize_write"}


def test_installed_metadata_lists_every_builtin_store():
    names = {ep.name for ep in importlib.metadata.entry_points(group="scopemem")}
    assert names >= BUILTIN_STORES | {"worker_server"}


def test_builtins_register_first_then_entry_points():
    pm = new_plugin_manager(environ={})
    names = [name for name, _plugin in pm.list_name_plugin()]
    assert names[:len(BUILTIN_PLUGINS)] == list(BUILTIN_PLUGINS)
    assert set(names) >= BUILTIN_STORES
    rows = {row["name"]: row for row in plugin_rows(pm)}
    assert rows["memory"]["distribution"] == "scopemem"
    assert "scopemem_register_stores" in rows["memory"]["hooks"]


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """An installed third-party distribution, scopemem-extra, whose entry point ``extra``
    registers a store of that name."""
    (tmp_path / "scopemem_extra.py").write_text(
        "from scopemem import hookimpl\n"
        "from scopemem.stores.null import NullStore\n\n"
        "@hookimpl\n"
        "def scopemem_register_stores(register):\n"
        "    register('extra', lambda settings: NullStore())\n")
    info = tmp_path / "scopemem_extra-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scopemem-extra\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text("[scopemem]\nextra = scopemem_extra\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "extra"


def test_load_plugins_env_restricts_third_party_entry_points_only(third_party):
    everything = set(store_registry(new_plugin_manager(environ={})).names())
    assert everything >= BUILTIN_STORES | {third_party}
    for only in ("", "memory", "nosuch"):
        pm = new_plugin_manager(environ={"SCOPEMEM_LOAD_PLUGINS": only})
        assert set(store_registry(pm).names()) == everything - {third_party}
        assert pm.get_plugin("worker_server") is not None
    pm = new_plugin_manager(environ={"SCOPEMEM_LOAD_PLUGINS": third_party})
    assert set(store_registry(pm).names()) == everything


def test_built_in_stores_serve_whatever_load_plugins_says(tmp_path):
    """``SCOPEMEM_LOAD_PLUGINS=""`` still has the default store: a command works."""
    config = tmp_path / "scopemem.toml"
    config.write_text(f'[memory]\nenabled = true\norganization = "acme"\n'
                      f'[memory.stores.sqlite]\npath = "{tmp_path / "data"}"\n')
    result = subprocess.run([sys.executable, "-m", "scopemem", "--config", str(config),
                             "remember", "the deploy needs the VPN up", "--scope", "me"],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={**os.environ, "SCOPEMEM_LOAD_PLUGINS": ""})
    assert result.returncode == 0, result.stderr


def test_disabled_plugins_env_blocks_entry_points_and_builtins():
    pm = new_plugin_manager(environ={
        "SCOPEMEM_DISABLED_PLUGINS": "null, scopemem.plugins.builtin_gate"})
    assert "null" not in store_registry(pm).names()
    assert pm.get_plugin("scopemem.plugins.builtin_gate") is None
    assert host.rejection_markers(pm, Candidate(kind=Kind.FACT, text="PR 12 was merged",
                                                source_thread_key="t")) == []


def test_shared_manager_is_built_once():
    assert get_plugin_manager() is get_plugin_manager()


def test_a_hookimpl_without_a_spec_is_refused():
    class Typo:
        @hookimpl
        def scopemem_register_store(self, register):  # missing "s"
            pass

    # Named as ``scopemem plugins`` names it, not by the object's repr (a module's path).
    with pytest.raises(PluginError, match=re.escape(
            "plugin 'Typo' implements scopemem_register_store, which is no scopemem hook")):
        new_plugin_manager(load_entry_points=False, extra_plugins=(Typo(),))


def test_a_hookimpl_with_an_argument_its_spec_lacks_is_refused_naming_the_plugin():
    """pluggy refuses it at registration: a ``PluginError`` naming the plugin, the hook and
    the argument (the command line's one-line error), not pluggy's traceback."""
    class Misnamed:
        @hookimpl
        def scopemem_scope_kinds(self, cfg):
            return []

    with pytest.raises(PluginError, match=re.escape(
            "plugin 'Misnamed' cannot be registered: hookimpl definition: "
            "scopemem_scope_kinds(cfg); Argument(s) {'cfg'} are declared in the hookimpl but "
            "can not be found in the hookspec")):
        new_plugin_manager(load_entry_points=False, extra_plugins=(Misnamed(),))


@pytest.mark.parametrize(("hook", "registry"), [
    ("scopemem_register_stores", store_registry),
    ("scopemem_register_providers", provider_registry),
    ("scopemem_register_embedders", embedder_registry),
])
def test_a_plugin_that_raises_registering_is_named_not_a_traceback(hook, registry):
    """As for commands: every command builds these registries, so a raise was a traceback
    on every command."""
    def boom(self, register):
        raise RuntimeError("no backend")

    plugin = type("Boom", (), {hook: hookimpl(boom)})()
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(plugin,))
    with pytest.raises(PluginError, match=re.escape(
            f"plugin 'Boom' failed in {hook}: RuntimeError: no backend")):
        registry(pm)


def test_registry_refuses_duplicates_and_lists_installed_on_unknown():
    registry: Registry = Registry("store", StoreError)
    registry.register("memory", InMemoryStore.from_settings)
    with pytest.raises(PluginError, match="registered twice"):
        registry.register("memory", InMemoryStore.from_settings)
    with pytest.raises(StoreError, match=r"installed: memory \(plugin may not be installed\)"):
        registry.get("postgres")


# --- hook tests (each hook by name, through a test plugin) ------------------------------------


class GuildPlugin:
    """What a Discord adapter would ship: a guild scope and a marker of its own."""

    @hookimpl
    def scopemem_scope_kinds(self, config):
        return [ScopeKind("guild", 15, lambda request: (
            f"guild:discord:{request.extra['guild']}" if "guild" in request.extra else None))]

    @hookimpl
    def scopemem_rejection_markers(self, candidate):
        return ["giveaway"] if "giveaway" in candidate.text.lower() else None


def guild_manager():
    return new_plugin_manager(load_entry_points=False, extra_plugins=(GuildPlugin(),))


def test_scopemem_scope_kinds_a_plugin_adds_a_scope_kind():
    pm = guild_manager()
    kinds = host.scope_kinds(pm, MemoryConfig(organization="acme"))
    assert set(kinds) == {"org", "repo", "channel", "user", "guild"}
    memory = Memory(MemoryConfig(enabled=True, organization="acme"), InMemoryStore(),
                    plugin_manager=pm)
    request = Request(user_id="discord:7", channel_id="discord:42", extra={"guild": "9"})
    assert memory.scope_keys(request) == [
        "org:acme", "guild:discord:9", "channel:discord:42", "user:discord:7"]


def test_scopemem_scope_kinds_a_later_plugin_replaces_a_builtin():
    class ShoutingUsers:
        @hookimpl
        def scopemem_scope_kinds(self, config):
            return [ScopeKind("user", 30, lambda r: r.user_id and f"user:{r.user_id.upper()}")]

    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(ShoutingUsers(),))
    kinds = host.scope_kinds(pm, MemoryConfig(organization="acme"))
    assert kinds["user"].derive(Request(user_id="slack:u1")) == "user:SLACK:U1"


def test_scopemem_rejection_markers_plugin_markers_add_to_the_builtin_gate():
    pm = guild_manager()
    lesson = Candidate(kind=Kind.FACT, text="pin node 20 for the build",
                       source_thread_key="t")
    assert host.rejection_markers(pm, lesson) == []
    giveaway = Candidate(kind=Kind.FACT, text="Join the GIVEAWAY channel",
                         source_thread_key="t")
    assert host.rejection_markers(pm, giveaway) == ["giveaway"]
    status = Candidate(kind=Kind.FACT, text="PR 12 was merged, giveaway done",
                       source_thread_key="t")
    markers = host.rejection_markers(pm, status)
    assert "giveaway" in markers and "pr_subject" in markers
    as_summary = Candidate(kind=Kind.SUMMARY, text="PR 12 was merged", source_thread_key="t")
    assert host.rejection_markers(pm, as_summary) == []


ACTOR = RunActor({"org": "org:acme", "channel": "channel:slack:C1", "user": "user:slack:U1"})
BREADTH = {"org": 0, "repo": 10, "channel": 20, "user": 30}
FACT = Candidate(kind=Kind.FACT, text="use the vpn", source_thread_key="t")


def test_scopemem_authorize_write_a_plugin_answer_comes_first_and_cannot_widen():
    class Strict:
        @hookimpl
        def scopemem_authorize_write(self, actor, target, candidate, origin):
            if target.startswith("user:"):
                return WriteDecision.narrow("org:acme", "oops")  # a widening: refused
            return WriteDecision.deny("strict")

    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Strict(),))
    decide = lambda target: host.authorize_write(  # noqa: E731
        pm, actor=ACTOR, target=target, candidate=FACT, origin="public", breadth=BREADTH)
    assert decide("org:acme") == WriteDecision.deny("strict")
    assert decide("user:slack:U1") == WriteDecision.deny("policy_widened")


@pytest.mark.parametrize(("origin", "target", "landed"), [
    ("dm", "org:acme", WriteDecision.narrow("user:slack:U1", "dm_origin")),
    ("private", "org:acme", WriteDecision.narrow("channel:slack:C1", "private_origin")),
    (None, "guild:discord:9", WriteDecision.narrow("channel:slack:C1", "unknown_origin")),
    ("public", "org:acme", WriteDecision.allow("org:acme")),
    ("dm", "user:slack:U1", WriteDecision.allow("user:slack:U1")),
])
def test_a_policy_that_allows_everything_keeps_the_origins_narrowing(origin, target, landed):
    """A plugin answering ``allow(target)`` (one of the three documented answers) took the
    built-in's place and put what a DM said in the org scope, which everyone reads: the
    built-in's narrowing by origin is a floor under every plugin's answer."""
    class Lenient:
        @hookimpl
        def scopemem_authorize_write(self, actor, target, candidate, origin):
            return WriteDecision.allow(target)

    actor = RunActor({**ACTOR.scopes, "guild": "guild:discord:9"})
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Lenient(),))
    assert host.authorize_write(pm, actor=actor, target=target, candidate=FACT, origin=origin,
                                breadth={**BREADTH, "guild": 15}) == landed
    # An installation that means it disables the built-in policy.
    pm = new_plugin_manager(environ={"SCOPEMEM_DISABLED_PLUGINS":
                                     "scopemem.plugins.builtin_policy"},
                            load_entry_points=False, extra_plugins=(Lenient(),))
    assert host.authorize_write(pm, actor=actor, target=target, candidate=FACT, origin=origin,
                                breadth={**BREADTH, "guild": 15}) == WriteDecision.allow(target)


class Broken:
    """A plugin that gets every hook wrong: it raises, or answers the wrong type."""

    def __init__(self, how: str) -> None:
        self.how = how

    @hookimpl
    def scopemem_scope_kinds(self, config):
        if self.how == "kinds raise":
            raise RuntimeError("no config")
        if self.how == "kinds junk":
            return ["guild"]

        def guild(request):
            return f"guild:discord:{request.extra['guild_id']}"  # KeyError without it

        return [ScopeKind("guild", 15, guild)]

    @hookimpl
    def scopemem_rejection_markers(self, candidate):
        if self.how == "markers raise":
            raise RuntimeError("gate down")
        return {"markers str": "spam", "markers int": 5, "markers spaced": ["no spam"],
                "markers long": ["s" * 65], "markers empty": [""]}.get(self.how)

    @hookimpl
    def scopemem_authorize_write(self, actor, target, candidate, origin):
        if self.how == "policy raises":
            raise RuntimeError("policy down")
        if self.how == "policy junk":
            return "allow"
        if self.how == "policy reason":
            return WriteDecision.deny("no\n[memory] reflection forged: offered 9")
        if self.how == "policy list":
            return WriteDecision.narrow(["user:slack:U1"], "narrowed")
        if self.how == "policy number":
            return WriteDecision.allow(12345)


@pytest.mark.parametrize(("how", "message"), [
    ("kinds raise", "plugin 'Broken' failed in scopemem_scope_kinds: RuntimeError: no config"),
    ("kinds junk", "plugin 'Broken' answered scopemem_scope_kinds with ['guild'], not a "
                   "list of ScopeKind"),
])
def test_a_plugin_whose_scope_kinds_fail_is_named(how, message):
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Broken(how),))
    with pytest.raises(PluginError, match=re.escape(message)):
        host.scope_kinds(pm, MemoryConfig(organization="acme"))


@pytest.mark.parametrize(("kind", "problem"), [
    (ScopeKind("a:b", 15, lambda request: None), "name is not a lowercase word"),
    (ScopeKind("", 15, lambda request: None), "name is not a lowercase word"),
    (ScopeKind("gu ild", 15, lambda request: None), "name is not a lowercase word"),
    (ScopeKind("all", 15, lambda request: None), "name is the scope word 'all'"),
    (ScopeKind("me", 15, lambda request: None), "name is the scope word 'me'"),
    (ScopeKind("guild", "15", lambda request: None), "breadth is not an integer"),
    (ScopeKind("guild", 15, "guild:1"), "derive is not callable"),
    # It completes the extractor's instruction: a number or a list went into the prompt.
    (ScopeKind("guild", 15, lambda request: None, description=["the server"]),
     "description is not a string"),
])
def test_a_scope_kind_that_cannot_be_used_is_refused_naming_its_plugin(kind, problem):
    class Odd:
        @hookimpl
        def scopemem_scope_kinds(self, config):
            return [kind]

    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Odd(),))
    with pytest.raises(PluginError, match=re.escape(
            f"plugin 'Odd' answered scopemem_scope_kinds with the kind {kind.name!r}, whose "
            f"{problem}")):
        host.scope_kinds(pm, MemoryConfig(organization="acme"))


def test_a_deriver_that_raises_costs_its_scope_and_is_named(memory_warnings):
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Broken("derive"),))
    memory = Memory(MemoryConfig(enabled=True, organization="acme"), InMemoryStore(),
                    plugin_manager=pm)
    assert memory.scope_keys(Request(user_id="discord:7")) == ["org:acme", "user:discord:7"]
    assert memory_warnings() == ["[memory] scope skipped: the guild deriver of plugin "
                                 "'Broken' failed: KeyError: 'guild_id'"]
    assert memory.scope_keys(Request(extra={"guild_id": "9"})) == [
        "org:acme", "guild:discord:9"]


@pytest.mark.parametrize(("how", "message"), [
    ("markers raise", "plugin 'Broken' failed in scopemem_rejection_markers: RuntimeError: "
                      "gate down"),
    ("markers str", "plugin 'Broken' answered scopemem_rejection_markers with 'spam', not a "
                    "list of marker names"),
    ("markers int", "plugin 'Broken' answered scopemem_rejection_markers with 5, not a "
                    "list of marker names"),
    # A marker is a counter's name (rejected:<marker>) and a log word: one that no store
    # keeps as a counter cost the whole batch of counts, and a newline forged log lines.
    ("markers spaced", "plugin 'Broken' answered scopemem_rejection_markers with the marker "
                       "'no spam', not a name of 1-64 letters, digits, '_', '.' or '-'"),
    ("markers long", "plugin 'Broken' answered scopemem_rejection_markers with the marker "
                     f"'{'s' * 65}', not a name of 1-64"),
    ("markers empty", "plugin 'Broken' answered scopemem_rejection_markers with the marker "
                      "'', not a name of 1-64"),
])
def test_a_gate_plugin_that_raises_or_answers_junk_is_named(how, message):
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Broken(how),))
    with pytest.raises(PluginError, match=re.escape(message)):
        host.rejection_markers(pm, FACT)


@pytest.mark.parametrize(("how", "message"), [
    ("policy raises",
     "plugin 'Broken' failed in scopemem_authorize_write: RuntimeError: policy down"),
    # The reason goes into the one [memory] log line: a newline in it forged lines.
    ("policy reason",
     "plugin 'Broken' answered scopemem_authorize_write with the reason "
     "'no\\n[memory] reflection forged: offered 9', not a name of 1-64 letters"),
    # docs/plugins.md: a wrong type is a PluginError naming the plugin, as a raise is, not
    # a silent denial counted as a widening.
    ("policy junk",
     "plugin 'Broken' answered scopemem_authorize_write with 'allow', not a WriteDecision"),
    # A list was a TypeError (unhashable) failing the reflection unnamed; a number a silent
    # denial counted as a widening.
    ("policy list",
     "plugin 'Broken' answered scopemem_authorize_write with the scope ['user:slack:U1'], "
     "not a scope key or None"),
    ("policy number",
     "plugin 'Broken' answered scopemem_authorize_write with the scope 12345, not a scope "
     "key or None"),
])
def test_a_policy_plugin_that_raises_or_answers_junk_is_named(how, message):
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Broken(how),))
    with pytest.raises(PluginError, match=re.escape(message)):
        host.authorize_write(pm, actor=ACTOR, target="org:acme", candidate=FACT,
                             origin="public", breadth=BREADTH)


def test_scopemem_register_stores_and_providers_registries():
    class Extra:
        @hookimpl
        def scopemem_register_stores(self, register):
            register("memory", InMemoryStore.from_settings)

        @hookimpl
        def scopemem_register_providers(self, register):
            register("echo", lambda settings: None)

    pm = new_plugin_manager(environ={"SCOPEMEM_LOAD_PLUGINS": "memory"},
                            extra_plugins=(Extra(),))
    with pytest.raises(PluginError, match="'memory' is registered twice"):
        store_registry(pm)
    providers: Registry = Registry("provider")
    pm.hook.scopemem_register_providers(register=providers.register)
    assert "echo" in providers.names()


@pytest.mark.parametrize("built", [None, object()])
def test_a_store_factory_that_builds_no_store_is_named_at_startup(built):
    """A factory answering something without the MemoryStore methods fails when memory is
    built, naming the store, not on every read and write after (a warning each)."""
    class NotAStore:
        @hookimpl
        def scopemem_register_stores(self, register):
            register("hollow", lambda settings: built)

    pm = new_plugin_manager(environ={"SCOPEMEM_LOAD_PLUGINS": ""}, extra_plugins=(NotAStore(),))
    with pytest.raises(PluginError, match=re.escape(
            f"store 'hollow' built {type(built).__name__}, not a store (it has no retrieve, "
            "write, list, forget, sweep, close)")):
        Memory.from_config({"memory": {"enabled": True, "organization": "acme",
                                       "store": "hollow"}}, plugin_manager=pm)


def test_scopemem_register_commands_adds_click_commands():
    from click.testing import CliRunner

    from scopemem.cli import build_cli

    class Hello:
        @hookimpl
        def scopemem_register_commands(self, cli):
            @cli.command()
            def hello():
                """Say hello."""
                print("hello from a plugin")

    cli = build_cli(new_plugin_manager(load_entry_points=False, extra_plugins=(Hello(),)))
    result = CliRunner().invoke(cli, ["hello"])
    assert result.exit_code == 0 and "hello from a plugin" in result.output
    assert {"plugins", "stores", "config"} <= set(cli.commands)


def test_a_command_name_registered_twice_is_refused_naming_both_plugins():
    """As for stores and providers, a duplicate name is loud: a plugin's ``list`` never
    silently replaces the built-in one (or is silently replaced by it)."""
    from scopemem.cli import build_cli

    class Shadow:
        @hookimpl
        def scopemem_register_commands(self, cli):
            @cli.command(name="list")
            def shadow():
                print("not the real list")

    with pytest.raises(PluginError, match=re.escape(
            "the command 'list' is registered twice (by plugin 'Shadow' and plugin "
            "'scopemem.cli.builtin_memory_commands')")):
        build_cli(new_plugin_manager(load_entry_points=False, extra_plugins=(Shadow(),)))


def test_a_plugin_whose_commands_fail_is_named_not_a_traceback():
    from scopemem.cli import build_cli

    class Boom:
        @hookimpl
        def scopemem_register_commands(self, cli):
            raise RuntimeError("no click today")

    with pytest.raises(PluginError, match=re.escape(
            "plugin 'Boom' failed in scopemem_register_commands: RuntimeError: no click "
            "today")):
        build_cli(new_plugin_manager(load_entry_points=False, extra_plugins=(Boom(),)))


def test_a_load_plugins_name_no_installed_plugin_has_is_warned_about(third_party, caplog):
    """A misspelt ``SCOPEMEM_LOAD_PLUGINS`` loads nothing of what was meant: it says so,
    naming the name, rather than starting without the plugin in silence."""
    with caplog.at_level(logging.WARNING, logger="scopemem"):
        new_plugin_manager(environ={"SCOPEMEM_LOAD_PLUGINS": f"{third_party}, extar"})
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "'extar'" in warned[0] and "'extra'" not in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scopemem"):
        new_plugin_manager(environ={"SCOPEMEM_LOAD_PLUGINS": f"{third_party},memory"})
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
