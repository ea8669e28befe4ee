"""Server-sent events read as the OpenAI SDK reads them, so any stream stock accepts, Ayo accepts.

The SDK (``openai._streaming.SSEDecoder``, after the WHATWG event-stream rules) builds an
event from ``field: value`` lines and dispatches it at a blank line: ``data:`` lines are
joined with ``\\n`` (one JSON document may span several), one space after the colon is
dropped (``data:{...}`` is as good as ``data: {...}``), ``event:``/``id:``/``retry:`` are
kept, lines starting with ``:`` are comments (keep-alives), other fields are ignored, and
an event the body ends before its blank line is never dispatched. The end of the body is
the end of the stream: ``data: [DONE]`` is optional (``transformers serve`` sends none).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event; ``data`` is its ``data:`` lines joined with ``\\n``."""

    data: str = ""
    event: str | None = None
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Line-at-a-time decoder; :meth:`decode` returns an event at each dispatching blank line."""

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[str] = []
        self._retry: int | None = None
        self._last_event_id: str | None = None  # kept across events, as the spec says

    def decode(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._last_event_id = value
        elif name == "retry":
            try:
                self._retry = int(value)
            except ValueError:
                pass
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._event and not self._data and not self._last_event_id and self._retry is None:
            return None
        sse = ServerSentEvent("\n".join(self._data), self._event or None, self._last_event_id, self._retry)
        self._event, self._data, self._retry = None, [], None
        return sse


async def iter_sse(lines: AsyncIterator[str]) -> AsyncIterator[ServerSentEvent]:
    """The events of a stream given as lines without their endings (``aiter_lines()``)."""
    decoder = SSEDecoder()
    async for line in lines:
        sse = decoder.decode(line)
        if sse is not None:
            yield sse
