"""The built-in model providers: an OpenAI-compatible chat-completions client and an
Anthropic messages client, both over aiohttp.

Each instance owns one ``aiohttp.ClientSession``, opened on the first ``complete`` and
released by ``close``. aiohttp itself is imported only then, so loading the plugin list (and
building a provider) stays cheap.

Options, the same for both (``[memory.providers.openai]`` / ``[memory.providers.anthropic]``):

* ``base_url``: where the API lives (``http://`` or ``https://``); a local OpenAI-compatible
  server works by pointing this at it.
* ``api_key_env``: the name of the environment variable holding the key (never the key).
* ``timeout_seconds``: a positive number; one call, connect to last byte, must fit in it,
  retries included.

A call is retried with the worker client's policy (``stores.retrying``): a connection that
failed or dropped, 429 and 503, and Anthropic's 529 (honouring ``Retry-After``), with
exponential backoff and jitter, within ``timeout_seconds`` in all. A timeout is not
retried: the model may have done (and billed) the work. A 400, 413 or 422 refuses what was
sent (``ProviderError.refused_input``): for the embedder, a text longer than its model takes.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import unquote, urlsplit

from scopemem.errors import ConfigError
from scopemem.plugins.markers import hookimpl
from scopemem.plugins.providers import DEFAULT_MAX_TOKENS, ProviderError, ProviderSettings

if TYPE_CHECKING:
    import aiohttp

__all__ = ["AnthropicProvider", "OpenAIProvider", "scopemem_register_providers"]

log = logging.getLogger("scopemem")

OPTIONS = ("base_url", "api_key_env", "timeout_seconds")
DEFAULT_TIMEOUT_SECONDS = 60.0
# A reflection reply is a few kilobytes of JSON; anything near this is not a reply.
MAX_REPLY_BYTES = 4 * 1024 * 1024
EXCERPT_CHARS = 200
# Statuses that refuse what was sent, not the caller: ``ProviderError.refused_input``.
INPUT_STATUSES = frozenset({400, 413, 422})

_SPACE = re.compile(r"\s+")


@hookimpl
def scopemem_register_providers(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("openai", OpenAIProvider.from_settings)
    register("anthropic", AnthropicProvider.from_settings)


def _base_url(settings: ProviderSettings, default: str) -> str:
    value = settings.string_option("base_url", default).strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query \
            or parts.fragment:
        from scopemem.core.secret_rules import redact_secrets

        raise ConfigError(
            f"{settings.option_key('base_url')}: expected an http:// or https:// URL without "
            f"a query, got {redact_secrets(value)!r}"
        )
    return value.rstrip("/")


def _key_env(settings: ProviderSettings, default: str) -> str:
    return settings.env_name_option("api_key_env", default, "the key")


class _HttpProvider:
    """One JSON POST per call; the subclasses say where, with which headers and body, and
    where the text is in the reply."""

    default_name: ClassVar[str]
    default_base_url: ClassVar[str]
    default_key_env: ClassVar[str]
    table: ClassVar[str] = "providers"  # memory.<table>.<name> holds the options
    # Statuses that say "busy, try again": retried after Retry-After or a backoff.
    busy_statuses: ClassVar[frozenset[int]] = frozenset()
    # The key goes in the Authorization header, where a URL's user:password@ goes too.
    key_authorizes: ClassVar[bool] = False

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        api_key_env: str,
        api_key: str | None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.name = name
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.timeout_seconds = timeout_seconds
        self._api_key = api_key or None
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    @classmethod
    def from_settings(cls, settings: ProviderSettings) -> Self:
        """Validate ``settings.options`` (``ConfigError`` naming the key) and build the
        provider. No I/O: the key is read from ``settings.environ`` now, used on call."""
        settings.unknown_options(OPTIONS)
        base_url = _base_url(settings, cls.default_base_url)
        key_env = _key_env(settings, cls.default_key_env)
        timeout = settings.positive_number_option("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
        api_key = settings.environ.get(key_env)
        if cls.key_authorizes and api_key and "@" in urlsplit(base_url).netloc:
            raise ConfigError(
                f"{settings.option_key('base_url')}: holds credentials (user:password@) while"
                f" ${key_env} holds a key; both would be the Authorization header: keep one")
        return cls(
            name=settings.name or cls.default_name,
            base_url=base_url,
            api_key_env=key_env,
            api_key=api_key,
            timeout_seconds=timeout,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={self.base_url!r})"

    # --- what differs between the APIs

    def _url(self) -> str:
        raise NotImplementedError

    def _headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _body(self, model: str, system: str, user: str, max_tokens: int) -> dict[str, Any]:
        raise NotImplementedError

    def _text(self, reply: Any) -> str:
        raise NotImplementedError

    # --- the one call

    async def complete(
        self, *, model: str, system: str, user: str, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> str:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if self._closed:
            raise ProviderError(f"{self.name}: the provider is closed")
        return self._text(await self._call(self._body(model, system, user, max_tokens)))

    async def _call(self, request: Mapping[str, Any]) -> Any:
        """POST ``request`` as JSON to ``_url()`` under the retry policy; the parsed reply.
        (The embedding client sends its own bodies through this.)"""
        headers = self._headers()
        body = json.dumps(request).encode()
        from scopemem.stores.retrying import RetryPolicy

        policy = RetryPolicy(self.timeout_seconds)
        raw = await policy.run(lambda budget: self._attempt(headers, body, budget))
        try:
            reply = json.loads(raw)
        # ValueError includes UnicodeDecodeError; RecursionError is JSON nested too deep.
        except (ValueError, RecursionError):
            raise ProviderError(f"{self.name}: the reply from {self._where()} is not JSON")\
                from None
        return reply

    async def close(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _attempt(self, headers: Mapping[str, str], body: bytes, budget: float) -> bytes:
        """One request within ``budget`` seconds: the 2xx reply's body, or ``ProviderError``
        (wrapped in ``Transient`` when another attempt may succeed)."""
        from scopemem.stores.retrying import TRANSIENT_STATUSES, Transient, retry_after

        status, reason, wait, raw = await self._post(headers, body, budget)
        if not 200 <= status < 300:
            excerpt = self._excerpt(raw)
            # Refused without a key: most often api_key_env names a variable that is unset.
            unset = (f" (no key sent: {self.api_key_env} is not set; memory.{self.table}."
                     f"{self.name}.api_key_env names it)"
                     if status in (401, 403) and not self._api_key else "")
            error = ProviderError(
                f"{self.name}: HTTP {status}{f' {reason}' if reason else ''} from "
                f"{self._where()}{f': {excerpt}' if excerpt else ''}{unset}",
                refused_input=status in INPUT_STATUSES)
            if status in TRANSIENT_STATUSES or status in self.busy_statuses:
                raise Transient(error, retry_after(wait))
            raise error
        return raw

    async def _post(self, headers: Mapping[str, str], body: bytes, budget: float
                    ) -> tuple[int, str, str | None, bytes]:
        import aiohttp

        from scopemem.stores.retrying import Transient

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_seconds)
            )
        try:
            async with self._session.post(
                    self._url(), data=body, headers=headers, allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=min(budget, self.timeout_seconds)),
            ) as response:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.content.iter_chunked(64 * 1024):
                    size += len(chunk)
                    if size > MAX_REPLY_BYTES:
                        raise ProviderError(
                            f"{self.name}: the reply from {self._where()} is larger than "
                            f"{MAX_REPLY_BYTES} bytes"
                        )
                    chunks.append(chunk)
                return (response.status, response.reason or "",
                        response.headers.get("Retry-After"), b"".join(chunks))
        except TimeoutError:
            raise ProviderError(
                f"{self.name}: no complete reply from {self._where()} within "
                f"{self.timeout_seconds:g} s"
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            # ``from None``: a chained aiohttp error can carry the request headers.
            detail = self._scrub(str(exc)) or type(exc).__name__
            raise Transient(ProviderError(
                f"{self.name}: request to {self._where()} failed: {detail}"
            )) from None

    # --- messages that are safe to log

    def _where(self) -> str:
        parts = urlsplit(self._url())
        host = parts.netloc.rpartition("@")[2]  # never show user:password@
        return f"{parts.scheme}://{host}{parts.path}"

    def _scrub(self, text: str) -> str:
        for secret in self._secrets():
            text = text.replace(secret, "[REDACTED]")
        from scopemem.core.secret_rules import redact_secrets

        return redact_secrets(_SPACE.sub(" ", text).strip())

    def _secrets(self) -> list[str]:
        """What no message may hold: the key, and the URL's password with the Basic
        credentials its ``user:password@`` becomes, longest first."""
        import base64

        parts = urlsplit(self.base_url)
        secrets = [self._api_key] if self._api_key else []
        if parts.password:
            basic = f"{unquote(parts.username or '')}:{unquote(parts.password)}"
            secrets += [base64.b64encode(basic.encode()).decode(), unquote(parts.password),
                        parts.password]
        return sorted(filter(None, secrets), key=len, reverse=True)

    def _excerpt(self, raw: bytes) -> str:
        """The server's reason for a refusal, short and without the key."""
        text = raw.decode("utf-8", errors="replace")
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to read
            parsed = None
        if isinstance(parsed, dict):
            error = parsed.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                text = error["message"]
            elif isinstance(error, str):
                text = error
            elif isinstance(parsed.get("message"), str):
                text = parsed["message"]
        text = self._scrub(text)
        if len(text) > EXCERPT_CHARS:
            text = text[:EXCERPT_CHARS].rstrip() + "…"
        return text

    def _malformed(self, what: str) -> ProviderError:
        return ProviderError(f"{self.name}: unusable reply from {self._where()}: {what}")


class OpenAIProvider(_HttpProvider):
    """OpenAI-compatible chat completions: ``POST {base_url}/chat/completions``.

    Works with any server speaking that API (vLLM, llama.cpp, Ollama, LM Studio, …) through
    ``base_url``. When the key's environment variable is unset or empty, the request goes
    without an ``Authorization`` header, which is what a local server usually wants.
    """

    default_name = "openai"
    default_base_url = "https://api.openai.com/v1"
    default_key_env = "OPENAI_API_KEY"
    key_authorizes = True

    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        else:
            log.debug("[memory] %s: $%s is not set; calling %s without an Authorization "
                      "header", self.name, self.api_key_env, self._where())
        return headers

    def _body(self, model: str, system: str, user: str, max_tokens: int) -> dict[str, Any]:
        return {
            "model": model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "max_tokens": max_tokens,
        }

    def _text(self, reply: Any) -> str:
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or not choices:
            raise self._malformed("no choices")
        first = choices[0]
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict):
            raise self._malformed("choices[0].message is not an object")
        content = message.get("content")
        if not isinstance(content, str):
            raise self._malformed("choices[0].message.content is not a string")
        return content


class AnthropicProvider(_HttpProvider):
    """Anthropic messages: ``POST {base_url}/v1/messages``. The key is required; without it
    a call fails before any request, naming the environment variable."""

    default_name = "anthropic"
    default_base_url = "https://api.anthropic.com"
    default_key_env = "ANTHROPIC_API_KEY"
    api_version = "2023-06-01"
    busy_statuses = frozenset({529})  # overloaded_error: the API is busy

    def _url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def _headers(self) -> dict[str, str]:
        if not self._api_key:
            raise ProviderError(
                f"{self.name}: no API key: the environment variable {self.api_key_env} is "
                f"not set (memory.providers.{self.name}.api_key_env names it)"
            )
        return {
            "x-api-key": self._api_key,
            "anthropic-version": self.api_version,
            "content-type": "application/json",
            "accept": "application/json",
        }

    def _body(self, model: str, system: str, user: str, max_tokens: int) -> dict[str, Any]:
        return {
            "model": model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        }

    def _text(self, reply: Any) -> str:
        content = reply.get("content") if isinstance(reply, dict) else None
        if not isinstance(content, list):
            raise self._malformed("content is not a list")
        texts: list[str] = []
        for block in content:
            if not isinstance(block, dict):
                raise self._malformed("a content block is not an object")
            if block.get("type") == "text":
                text = block.get("text")
                if not isinstance(text, str):
                    raise self._malformed("a text block's text is not a string")
                texts.append(text)
        if not texts:
            raise self._malformed("no text block in content")
        return "".join(texts)
