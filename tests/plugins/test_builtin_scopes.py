"""The built-in scope derivers: org from config, the others from the request's own ids."""

from __future__ import annotations

import pytest

from scopemem import MemoryConfig, Request
from scopemem.core.requests import ScopeRefused, derive_scope_key, request_scope_keys
from scopemem.plugins import host
from scopemem.plugins.manager import new_plugin_manager


def kinds(organization: str | None = "acme"):
    pm = new_plugin_manager(load_entry_points=False)
    return host.scope_kinds(pm, MemoryConfig(organization=organization))


def test_each_kind_is_derived_from_its_namespaced_input():
    request = Request(user_id="slack:U0123", channel_id="slack:C0456", repo="acme/api")
    derived = {name: derive_scope_key(kinds(), name, request)
               for name in ("org", "repo", "channel", "user")}
    assert derived == {"org": "org:acme", "repo": "repo:acme/api",
                       "channel": "channel:slack:C0456", "user": "user:slack:U0123"}


def test_no_organization_is_refused_never_a_shared_bucket():
    with pytest.raises(ScopeRefused, match="memory.organization"):
        derive_scope_key(kinds(None), "org", Request())


@pytest.mark.parametrize("name", ["user", "channel", "repo"])
@pytest.mark.parametrize("value", [None, "", "   "])
def test_a_scope_without_its_input_is_refused(name, value):
    request = Request(user_id=value, channel_id=value, repo=value)
    with pytest.raises(ScopeRefused, match=f"no {name} scope"):
        derive_scope_key(kinds(), name, request)


@pytest.mark.parametrize("name", ["user", "channel"])
def test_an_id_empty_after_its_namespace_is_refused_never_a_shared_bucket(name):
    request = Request(user_id="slack:", channel_id="slack:")
    with pytest.raises(ScopeRefused, match=f"the {name} id 'slack:' is empty after its "
                                           "namespace"):
        derive_scope_key(kinds(), name, request)
    keys, refusals = request_scope_keys(kinds(), request)
    assert keys == ["org:acme"] and len(refusals) == 2


def test_a_scope_key_given_for_an_id_is_refused_naming_the_id_to_pass():
    """``Request(user_id=caller.user_key)`` made ``user:user:slack:U0123``: reflection wrote
    the person's lessons where their own ``memory list`` (``user:slack:U0123``) never
    looks, so they could neither see nor forget them."""
    request = Request(user_id="user:slack:U0123", channel_id="channel:slack:C1")
    keys, refusals = request_scope_keys(kinds(), request)
    assert keys == ["org:acme"]
    assert refusals == [
        "the channel id 'channel:slack:C1' is the channel scope's key: pass the platform "
        "id, 'slack:C1'",
        "the user id 'user:slack:U0123' is the user scope's key: pass the platform id, "
        "'slack:U0123'"]


def test_an_id_holding_a_lone_surrogate_is_refused_never_sent_to_a_store():
    request = Request(user_id="slack:U\ud800", channel_id="slack:C1")
    keys, refusals = request_scope_keys(kinds(), request)
    assert keys == ["org:acme", "channel:slack:C1"]
    assert refusals == ["the user scope key is not valid Unicode text (it holds a lone "
                        "surrogate)"]


def test_request_scope_keys_widest_first_and_org_only_without_identity():
    keys, refusals = request_scope_keys(kinds(), Request(
        user_id="slack:U1", channel_id="slack:C1", repo="acme/api"))
    assert keys == ["org:acme", "repo:acme/api", "channel:slack:C1", "user:slack:U1"]
    assert refusals == []
    assert request_scope_keys(kinds(), Request())[0] == ["org:acme"]
    assert request_scope_keys(kinds(), Request(user_id="slack:U1"))[0] == [
        "org:acme", "user:slack:U1"]


def test_an_unresolved_repo_is_no_repo_scope():
    async def later() -> str:
        return "acme/api"

    pending = later()
    assert request_scope_keys(kinds(), Request(repo=pending))[0] == ["org:acme"]
    pending.close()


def test_unusable_ids_are_refused_with_a_reason():
    keys, refusals = request_scope_keys(kinds(), Request(user_id="slack:U 1"))
    assert keys == ["org:acme"] and "user" in refusals[0]
