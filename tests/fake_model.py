"""A fake OpenAI-compatible model server on loopback, for end-to-end tests.

It runs in a thread of its own (``http.server``), so a program under test in another process
(``scopemem mcp``, ``scopemem hook``) can call it while the test itself blocks on that
process. Every request is recorded; each reply is the next one scripted (an envelope, sent
as JSON, or a string, sent verbatim as the reply's text, as a chat model may wrap its JSON),
or a reply with no facts when the script has run out. It serves ``/embeddings`` too, with
``tests.fake_embedder``'s vectors, refusing as vLLM does (400) a text longer than
``embed_limit`` characters, or answering every embedding request ``embed_status`` (a server
that is down). Point a config at it with::

    [memory.providers.openai]
    base_url = "<server.base_url>"     # ends in /v1
    api_key_env = "FAKE_MODEL_KEY"

and ``model = "openai/fake-model"`` in ``[memory]``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def lesson(text: str, **extra: Any) -> dict[str, Any]:
    """One fact as the reflection extractor returns it."""
    return {"text": text, "confidence": 0.9, **extra}


class FakeModel:
    """The scripted state behind the server: ``replies`` are reflection envelopes
    (``{"facts": [...]}``, or the reply's text as a string) answered in order; ``requests``
    are the bodies received."""

    def __init__(self) -> None:
        self.replies: list[Mapping[str, Any] | str] = []
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""
        self.embed_limit: int | None = None  # longer texts: 400, as vLLM refuses them
        self.embed_status: int | None = None  # every /embeddings request answered this
        self.embedded: list[list[str]] = []  # the texts of every /embeddings request
        self._lock = threading.Lock()

    def embed(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """An ``/embeddings`` request's (status, reply)."""
        from tests.fake_embedder import vector

        texts = [str(text) for text in body.get("input", [])]
        with self._lock:
            self.embedded.append(texts)
        if self.embed_status is not None:
            return self.embed_status, {"error": {"message": "unavailable"}}
        if self.embed_limit is not None and any(len(text) > self.embed_limit
                                                for text in texts):
            return 400, {"object": "error", "code": 400, "type": "BadRequestError",
                         "message": "This model's maximum context length is 512 tokens. "
                                    "However, you requested 1020 tokens in the input for "
                                    "embedding generation. Please reduce the length of the "
                                    "input."}
        return 200, {"object": "list", "model": body.get("model", "fake-embedder"),
                     "data": [{"object": "embedding", "index": index,
                               "embedding": vector(text)}
                              for index, text in enumerate(texts)]}

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            envelope = self.replies.pop(0) if self.replies else {"facts": []}
        content = envelope if isinstance(envelope, str) else json.dumps(envelope)
        return {
            "id": f"fake-{len(self.requests)}",
            "object": "chat.completion",
            "model": body.get("model", "fake-model"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
        }

    def prompts(self) -> list[str]:
        """The user message of every request received, in order."""
        with self._lock:
            return [message["content"] for body in self.requests
                    for message in body.get("messages", []) if message.get("role") == "user"]


def _handler(model: FakeModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self.send_error(400, "not JSON")
                return
            if self.path.endswith("/embeddings"):
                status, reply = model.embed(body)
            elif self.path.endswith("/chat/completions"):
                status, reply = 200, model.answer(body)
            else:
                self.send_error(404, "unknown path")
                return
            raw = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return  # quiet: pytest shows what matters

    return Handler


@contextmanager
def fake_model_server() -> Iterator[FakeModel]:
    """Serve a ``FakeModel`` on 127.0.0.1 (a free port) until the block ends."""
    model = FakeModel()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(model))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="fake-model", daemon=True)
    thread.start()
    model.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield model
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
