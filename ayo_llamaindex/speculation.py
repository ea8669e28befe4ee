"""Speculative synthesis: start answering while ``LLMRerank`` is still decoding its choices.

Decode pipelining across the rerank -> synthesis edge. The reranker's answer is
streamed; after every finished line, its own parser (``_parse_raw_response``, i.e. the
user's ``parse_choice_select_answer_fn``) and its own sorting give the nodes the
*partial* answers already select. Once that selection holds ``top_n`` nodes and stays
the same for two consecutive lines, synthesis starts on it, concurrently with the rest
of the rerank decode (vLLM batches the two). When the rerank is done, the final
selection is compared with the speculated one by the exact text chunks synthesis
reads (``get_content(MetadataMode.LLM)``, in order): equal -> the speculative answer
is the stock answer (same prompts, greedy decoding) and is used with the final source
nodes; different -> it is cancelled and synthesis runs normally. Either way the
result is stock's; a wrong guess only costs compute.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from llama_index.core.schema import MetadataMode

log = logging.getLogger(__name__)

MAX_STARTS = 2  # speculative syntheses per query (a changed selection restarts once)
STABLE_LINES = 2  # finished lines over which the selection must not change


def chunk_key(nodes: list[Any]) -> tuple[str, ...]:
    """What synthesis reads from the nodes (so equal keys give equal answers)."""
    return tuple(n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes)


class RerankSpeculation:
    """One query's speculation: fed the rerank batches' text deltas, owns at most one synthesis task."""

    def __init__(self, pp: Any, batches: list[list[Any]], start: Callable[[Any, list[Any]], Awaitable[Any]]) -> None:
        self.pp, self.batches, self._start = pp, batches, start
        self.ctx: Any = None  # the context of a rerank decode node: speculation sends through its engines
        self.texts = [""] * len(batches)
        self.total = sum(len(b) for b in batches)
        self.task: asyncio.Task | None = None
        self.key: tuple[str, ...] | None = None
        self.starts = 0
        self.hit: bool | None = None
        self._last: tuple[str, ...] | None = None
        self._stable = 0

    def index_of(self, batch: list[Any]) -> int:
        return next(i for i, b in enumerate(self.batches) if b is batch)

    def on_delta(self, index: int, delta: str) -> None:
        self.texts[index] += delta
        if "\n" not in delta or self.starts >= MAX_STARTS or self.ctx is None:
            return
        selection = self._partial_selection()
        if selection is None:
            self._last, self._stable = None, 0
            return
        key = chunk_key(selection)
        self._stable = self._stable + 1 if key == self._last else 1
        self._last = key
        if self._stable >= STABLE_LINES and key != self.key:
            self._launch(selection, key)

    def _partial_selection(self) -> list[Any] | None:
        """The reranker's own parse + sort of the finished lines so far (None: not enough yet)."""
        initial: list[Any] = []
        for text, batch in zip(self.texts, self.batches, strict=True):
            finished = text[: text.rfind("\n") + 1]
            try:
                initial.extend(self.pp._parse_raw_response(finished, batch))
            except Exception:  # noqa: BLE001 - a partial answer the parser rejects: not ready
                return None
        selection = sorted(initial, key=lambda x: x.score or 0.0, reverse=True)[: self.pp.top_n]
        return selection if len(selection) >= min(self.pp.top_n, self.total) and selection else None

    def _launch(self, selection: list[Any], key: tuple[str, ...]) -> None:
        self.cancel()
        self.key, self.starts = key, self.starts + 1
        self.task = asyncio.ensure_future(self._start(self.ctx, selection))
        log.debug("speculative synthesis #%d on %d nodes", self.starts, len(selection))

    async def take(self, final: list[Any]) -> tuple[bool, Any]:
        """``(True, answer)`` when the speculation used exactly ``final``'s chunks, else ``(False, None)``."""
        task, key = self.task, self.key
        if task is None or key != chunk_key(final):
            self.hit = False if task is not None else None
            self.cancel()
            return False, None
        try:
            answer = await task
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the normal path runs (and reports) it again
            log.debug("speculative synthesis failed; synthesizing normally", exc_info=True)
            self.hit = False
            return False, None
        finally:
            self.task = None
        self.hit = True
        return True, answer

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.task = None
