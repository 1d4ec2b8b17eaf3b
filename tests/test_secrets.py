"""``scopemem.secrets``: the corpus is redacted, ordinary lessons are not, and ``remember``
stores what redaction leaves."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scopemem import Memory, MemoryConfig, handle_command
from scopemem.core.hygiene import fit_candidate
from scopemem.core.records import Candidate, Kind
from scopemem.core.secret_rules import redact_secrets
from scopemem.core.text import sanitize_field
from scopemem.secrets import redact, redact_candidate
from scopemem.stores.memory import InMemoryStore
from tests.secret_corpus import CORPUS, ORDINARY

ALICE = "user:slack:UA"


@pytest.mark.parametrize("secret", CORPUS, ids=lambda secret: secret.kind)
def test_every_corpus_secret_is_redacted(secret):
    redacted = redact(secret.text)
    assert "[REDACTED:" in redacted
    assert secret.raw not in redacted
    assert not [fragment for fragment in secret.fragments if fragment in redacted]
    assert redact(redacted) == redacted


@pytest.mark.parametrize("secret", [secret for secret in CORPUS if secret.hidden],
                         ids=lambda secret: secret.kind)
def test_a_disguised_secret_is_redacted_as_a_reader_would_see_it(secret):
    """Split by an invisible character (which rendering deletes), fullwidth, spaced out or
    base64-wrapped: the rendered text never holds the token it hides."""
    redacted = redact(secret.text)
    assert "[REDACTED:" in redacted
    rendered = sanitize_field(redacted)
    assert secret.hidden not in rendered
    assert secret.hidden not in "".join(unicodedata.normalize("NFKC", rendered).split())


@pytest.mark.parametrize("secret", [secret for secret in CORPUS
                                    if secret.kind.startswith("split_")],
                         ids=lambda secret: secret.kind)
def test_the_core_rules_read_a_split_token_whole_too(secret):
    redacted = redact_secrets(secret.text)
    assert "[REDACTED:" in redacted and secret.hidden not in sanitize_field(redacted)


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_lessons_come_out_unchanged(text):
    assert redact(text) == text


async def test_remember_stores_the_redacted_text(clock):
    store = InMemoryStore(clock=clock)
    memory = Memory(MemoryConfig(enabled=True, organization="acme", store="memory"), store,
                    clock=clock)
    for secret in CORPUS:
        reply = await handle_command(memory, f"memory remember remember that {secret.text}",
                                     ALICE, channel_id="slack:C1")
        assert reply.startswith("🧠") and "redacted" in reply, (secret.kind, reply)
    records = await store.list(ALICE, 500)
    assert len(records) == len(CORPUS)
    stored = "\n".join(record.text for record in records)
    for secret in CORPUS:
        assert secret.raw not in stored, secret.kind
        assert not [f for f in secret.fragments if f in stored], secret.kind


def test_redaction_then_fitting_covers_the_text_and_each_keyword():
    candidate = Candidate(kind=Kind.FACT, text="the key is sk-" + "a" * 40,
                          source_thread_key="t",
                          keywords=("key", "password=hunter2xyz", "hunter2xyz", "openai"))
    cleaned = fit_candidate(redact_candidate(candidate))
    assert "sk-aaaa" not in cleaned.text and "[REDACTED:openai_key]" in cleaned.text
    assert cleaned.keywords == ("key", "openai")


async def test_reflection_sends_and_stores_no_secret(clock):
    from tests.api.test_memory_write import Scripted, lesson, make_memory, reflect, run

    store, scripted = InMemoryStore(clock=clock), Scripted()
    memory = make_memory(store, clock, scripted)
    groups = [CORPUS[start:start + 5] for start in range(0, len(CORPUS), 5)]
    scripted.replies = [{"facts": [
        lesson(secret.text, keywords=["credentials", "password=", secret.raw.lower()[:60]])
        for secret in group]} for group in groups]
    for group in groups:
        await reflect(memory, run(answer="\n".join(secret.text for secret in group)))
    sent = "\n".join(call["user"] for call in scripted.calls)
    records = [record for scope in ("org:acme",) for record in await store.list(scope, 500)]
    assert len(scripted.calls) == len(groups) and len(records) == len(CORPUS)
    stored = "\n".join(f"{r.text} {' '.join(r.keywords or ())}" for r in records)
    for secret in CORPUS:
        for needle in (secret.raw, *secret.fragments):
            assert needle not in sent and needle.lower() not in stored.lower(), secret.kind


_SECRETISH = st.lists(st.sampled_from(
    list("aAkK019_-.:=/@+ \"'") + ["AKIA", "xoxb-", "eyJ", "password", "://u:", "-u ", "SG.",
                                   "hvs.", "npm_", "token=", "@host.io", "[REDACTED:jwt]",
                                   "\u200b", "\u00ad", "\x00", "ｇｈｐ＿", "Ａ１", "g h p _ ",
                                   "a 1 ", "Z2hwX2", "==", "mysql -p", "sshpass -p ",
                                   "login x password ", "\npassword ", "password is ",
                                   "pass: ", "lin_api_", "GOCSPX-", "aws ", "://k1"]),
    max_size=40).map("".join)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.text(max_size=200), _SECRETISH,
                 st.lists(st.sampled_from([s.text for s in CORPUS] + list(ORDINARY)),
                          max_size=4).map(" ".join)))
# An assignment inside the value of another (``blob="A=…"``), the outer value not random.
@example('Z2xwYXQtQ000Q000LTQ0Q000Q000LTg0LS0="A=000001112233445567AA')
def test_redaction_is_idempotent_and_never_raises(text):
    once = redact(text)
    assert redact(once) == once


@pytest.mark.parametrize("text", [
    "a " * 50_000,
    ("a " * 15 + "bb ") * 3_000,
    "mysql -u x " * 5_000,
    "sshpass" + " -f x" * 10_000,
    "login x password " * 5_000,
    "password x y\n" * 5_000,
    "A" * 50_000,
    ("QUJD" * 8 + " ") * 3_000,
    ("://" + "a1" * 20 + "@") * 3_000,
    "password is " * 8_000,
    "aws " + "Ab1/" * 20_000,
    "ｇｈｐ＿" * 20_000,
    "\u200b" * 50_000,
], ids=lambda text: repr(text[:12]))
def test_hostile_input_completes_and_redacts_once(text):
    out = redact(text)
    assert redact(out) == out
