"""The engines' HTTP client: aiohttp underneath, the small part of httpx's API the engines use on top.

Why not ``httpx.AsyncClient``: on asyncio it runs httpcore through anyio, whose cancel scopes
and per-check socket bookkeeping cost ~1.6-1.9 ms of CPU per request on this machine against
~0.5 ms for aiohttp on the same loopback stub (``benchmarks/overhead.py``). Every model call an
optimized pipeline makes pays that, while stock's sync path uses httpx's cheaper sync client, so
the transport alone was most of what Ayo added to a call.

The engines keep speaking httpx's vocabulary (``post``, ``stream``, ``get``, ``status_code``,
``aiter_lines``; failures as ``httpx.HTTPError`` subclasses), so their error mapping, the SDK
error shims and tests that hand an engine an ``httpx.AsyncClient`` over a mock transport keep
working unchanged.
"""

from __future__ import annotations

import codecs
import json
import re
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import httpx

# Below uvicorn's (vLLM's) 5 s keep-alive: a connection the server may already have closed is
# never reused, because aiohttp does not resend a POST that met a closed connection.
KEEPALIVE_S = 4.0
_LINE_END = re.compile(r"\r\n|\r|\n")


class _QuietConnector(aiohttp.TCPConnector):
    """A connector that, collected unclosed, lets its sockets close with it (as httpx's do).

    A caller's finished ``asyncio.run`` leaves its client behind with a closed loop; aiohttp would
    report "Unclosed connector" through that dead loop's exception handler. There is nothing left
    to do on a closed loop: the socket objects close when collected.
    """

    def __del__(self, _warnings: Any = None) -> None:
        pass


class Response:
    """A finished response: what the engines read of ``httpx.Response``."""

    def __init__(self, status_code: int, headers: Mapping[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class StreamingResponse:
    """A response whose body is read as it arrives (server-sent events)."""

    def __init__(self, raw: aiohttp.ClientResponse) -> None:
        self._raw = raw
        self.status_code = raw.status
        self.headers = raw.headers

    async def aread(self) -> bytes:
        return await _guarded(self._raw.read())

    async def aiter_lines(self) -> AsyncIterator[str]:
        """Lines without their ending, decoded as UTF-8 across chunk borders. A line ends at
        ``\\r\\n``, ``\\n`` or ``\\r``, as the OpenAI SDK's event decoder splits them (``bytes.splitlines``).
        Chunks are split here rather than by aiohttp's ``readline``, which caps a line's length."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        pending = ""
        while True:
            chunk = await _guarded(self._raw.content.readany())
            if not chunk:
                break
            pending += decoder.decode(chunk)
            # a "\r" last may be the first half of a "\r\n" the next chunk completes
            held = "\r" if pending.endswith("\r") else ""
            *lines, pending = _LINE_END.split(pending[:-1] if held else pending)
            pending += held
            for line in lines:
                yield line
        lines = _LINE_END.split(pending + decoder.decode(b"", final=True))
        for line in lines if lines[-1] else lines[:-1]:
            yield line


def _as_httpx_error(exc: BaseException) -> httpx.HTTPError:
    """The httpx exception an httpx client would have raised for this aiohttp failure."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(str(exc) or "connect timed out")
    if isinstance(exc, (TimeoutError, aiohttp.ServerTimeoutError)):
        return httpx.ReadTimeout(str(exc) or "read timed out")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(str(exc))
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return httpx.RemoteProtocolError(str(exc) or type(exc).__name__)
    return httpx.ReadError(str(exc) or type(exc).__name__)


async def _guarded(awaitable: Any) -> Any:
    try:
        return await awaitable
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise _as_httpx_error(exc) from exc


def _encode(body: Any) -> bytes:
    # httpx's own encoding of ``json=``, so request bodies are byte-for-byte what they were
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


_JSON_HEADERS = {"Content-Type": "application/json"}


class AsyncHTTPClient:
    """One event loop's connection pool to the engines' servers (see the module doc).

    ``timeout`` bounds each read (for a stream: the wait for the next chunk), ``connect_timeout``
    reaching the server; ``headers`` go with every request (``Authorization`` for a keyed server).
    """

    def __init__(self, timeout: float, connect_timeout: float, max_connections: int) -> None:
        self.headers: dict[str, str] = {}
        self._session = aiohttp.ClientSession(
            connector=_QuietConnector(limit=max_connections, keepalive_timeout=KEEPALIVE_S),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=timeout),
            skip_auto_headers=("User-Agent",))
        # Detached when this client is collected: an unclosed session would report itself
        # through its (possibly closed) loop; its connector closes quietly (see above).
        weakref.finalize(self, self._session.detach)

    @property
    def is_closed(self) -> bool:
        return self._session.closed

    async def aclose(self) -> None:
        await self._session.close()

    def _headers(self) -> dict[str, str]:
        return {**_JSON_HEADERS, **self.headers}

    async def _fetch(self, method: str, url: str, **kwargs: Any) -> Response:
        async def send() -> Response:
            async with self._session.request(method, url, **kwargs) as raw:
                return Response(raw.status, raw.headers, await raw.read())
        return await _guarded(send())  # type: ignore[no-any-return]

    async def post(self, url: str, json: Any) -> Response:  # noqa: A002 - httpx's name
        return await self._fetch("POST", url, data=_encode(json), headers=self._headers())

    async def get(self, url: str, timeout: float | None = None) -> Response:
        limit = aiohttp.ClientTimeout(total=timeout) if timeout is not None else None
        return await self._fetch("GET", url, headers=self.headers, timeout=limit)

    @asynccontextmanager
    async def stream(self, method: str, url: str, json: Any) -> AsyncIterator[StreamingResponse]:  # noqa: A002
        raw = await _guarded(self._session.request(method, url, data=_encode(json), headers=self._headers()))
        try:
            yield StreamingResponse(raw)
        finally:
            raw.release() if raw.content.at_eof() else raw.close()  # an unfinished stream: drop the connection
