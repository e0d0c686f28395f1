"""`Client`: the one shared `httpx.AsyncClient` a level runs on (over the harness's own
transport, transport.py), the served model's name (/v1/models), streamed requests sent
straight to the transport (`open_stream`), and the server's chat-templated token count
(`count_chat_tokens`, POST /tokenize)."""

from __future__ import annotations

import httpx

from apps.benchmarks.harness.transport import _Transport
from vllm_adapter import endpoints
from vllm_adapter.endpoints import error_message as _error_text

CHAT_PATH = endpoints.CHAT_COMPLETIONS
COMPLETIONS_PATH = endpoints.COMPLETIONS


class Client:
    """One shared `httpx.AsyncClient` to a vLLM base URL (e.g. http://127.0.0.1:8000).

    Connection limits sit far above any concurrency the harness runs (httpx's default of
    100 would queue requests client-side), and the transport's pool is `_FlatPool` (O(1)
    per request) instead of httpcore's; connect timeout 10 s, no read timeout on streams,
    and a total per-request timeout (`request_timeout`) enforced by the harness.
    Proxy variables from the environment are ignored (`trust_env=False`): the servers are
    on the LAN.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        max_connections: int = 1024,
        request_timeout: float = 1800.0,
        connect_timeout: float = 10.0,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=60,
        )
        timeout = httpx.Timeout(connect=connect_timeout, read=None, write=60.0, pool=None)
        self._transport = transport or _Transport(limits)
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            limits=limits,
            timeout=timeout,
            trust_env=False,
            transport=self._transport,
        )
        self._chat_url = httpx.URL(self.base_url + CHAT_PATH)
        self._completions_url = httpx.URL(self.base_url + COMPLETIONS_PATH)
        # Plain HTTP on the default transport: connections stamp their own reads/writes.
        self.stamped = transport is None and self._chat_url.scheme == "http"
        self._stream_headers = {**endpoints.STREAM_HEADERS, **headers}
        self._timeouts = timeout.as_dict()
        # (chat?, n_tokens) -> (filler words, tail words) that hit n exactly last time
        self._templates: dict[tuple[bool, int], tuple[int, tuple[str, ...]]] = {}

    @property
    def receive_stamps(self) -> str:
        """Whose clock dated the answers' bytes: "kernel" (the time they came in,
        SO_TIMESTAMPNS), "event loop" (when the loop handed them over), or "task" (when the
        reading task got them: TLS, or a transport passed in)."""
        if not self.stamped:
            return "task"
        return "kernel" if self._transport._pool._backend.kernel_stamps else "event loop"

    @classmethod
    async def create(cls, base_url: str, model: str | None = None, **kwargs) -> Client:
        """A client; with `model=None` the served model's name comes from /v1/models."""
        client = cls(base_url, model or "", **kwargs)
        if model is None:
            try:
                client.model = await client.discover_model()
            except BaseException:
                await client.aclose()
                raise
        return client

    async def discover_model(self) -> str:
        response = await self.http.get(endpoints.MODELS, timeout=10)
        response.raise_for_status()
        ids = endpoints.model_ids(response.json())
        if not ids:
            raise RuntimeError(f"{self.base_url}{endpoints.MODELS} lists no model")
        return ids[0]

    async def open_stream(
        self, payload: bytes, trace=None, *, completions: bool = False
    ) -> httpx.Response:
        """POST a serialised chat-completions (or, with `completions`, completions) body and
        return the response with its body unread. It goes straight to the shared client's
        transport (the same connection pool): AsyncClient.send's per-request machinery
        (URL merging, cookies, auth and redirect handling) costs about half a millisecond
        of CPU per request, which at 64 streams delays everything else the loop is timing."""
        extensions = {"timeout": self._timeouts}
        if trace is not None:
            extensions["trace"] = trace
        url = self._completions_url if completions else self._chat_url
        request = httpx.Request("POST", url, content=payload,
                                headers=self._stream_headers, extensions=extensions)  # fmt: skip
        response = await self._transport.handle_async_request(request)
        response.request = request
        return response

    async def count_chat_tokens(self, messages: list[dict]) -> int:
        """The chat-templated length of `messages`, by the server's own tokenizer."""
        return await self._count(endpoints.tokenize_chat_body(self.model, messages))

    async def count_text_tokens(self, prompt: str) -> int:
        """The length of a completions prompt (special tokens added, as /v1/completions
        does), by the server's own tokenizer."""
        return await self._count(endpoints.tokenize_body(self.model, prompt))

    async def _count(self, body: dict) -> int:
        response = await self.http.post(endpoints.TOKENIZE, json=body, timeout=60)
        if response.status_code != 200:
            raise RuntimeError(
                f"POST {endpoints.TOKENIZE} answered HTTP {response.status_code}: "
                f"{_error_text(response.content)}"
            )
        return endpoints.token_count(response.json())

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
