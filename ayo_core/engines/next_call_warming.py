"""An agent's next model call: its prompt prefix warmed in the server's KV cache while the tools run.

Once a model's message with tool calls is complete, everything the agent's next model request will
hold is known except the tools' results: the messages the model just got, the message itself, and
the tools' schemas. The adapter renders that next request with its framework's own message
conversion, twice, with the two :data:`~ayo_core.engines.prefix_warming.STAND_INS` as every tool
result (``render(stand_in)``: the ``/tokenize`` arguments); :class:`NextCallWarms` does the rest, in
an owned task of its own, concurrently with the tools: the device rule (:func:`warm_budget`: nothing
on a CPU server or with the prefix cache off), the shared token prefix of the two renders
(:func:`token_prefix`), one prefill-only request of it cut to whole KV blocks (:func:`warm_ids`).

The real request is never changed: a warm-up that is wrong, late or failed costs at most the cache.
When the next request begins (the adapter reports the tool call ids its messages answer), a warm-up
still tokenizing is cancelled (it could only compete with the request now); a failure is logged at
debug level. ``log`` keeps what each warm-up did, ``summary()`` is its line for ``explain()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ayo_core.engines.prefix_warming import STAND_INS, token_prefix, warm_budget, warm_ids
from ayo_core.engines.registry import get_llm_engine
from ayo_core.runtime.owned import start_owned

log = logging.getLogger(__name__)
MAX_PENDING = 1024  # warm-ups whose next request has not begun (it never does when a tool raised)
Render = Callable[[str], Mapping[str, Any]]  # stand-in -> the next request's /tokenize arguments


class NextCallWarms:
    """The next-call warm-ups of one optimized agent: the running ones and a log of what each did."""

    def __init__(self) -> None:
        self.log: deque[dict[str, Any]] = deque(maxlen=256)  # what explain() shows
        self.tasks: set[asyncio.Future] = set()
        self._pending: dict[str, tuple[dict[str, Any], asyncio.Future]] = {}  # tool call id -> its warm-up

    def start(self, call_ids: list[str], url: str, model: str, render: Render,
              cache: Mapping[str, Any] | None = None) -> None:
        """Warm the request that will follow the tool calls ``call_ids`` (returns at once). ``render``
        must not read anything the agent may still change: snapshot the message first. ``cache``:
        request fields that scope the server's prefix cache (``cache_salt``), sent with the warm-up."""
        entry: dict[str, Any] = {"calls": list(call_ids), "started": time.perf_counter(), "sent": None,
                                 "done": None, "tokens": 0, "next_request": None, "outcome": "pending"}
        task = start_owned(self._warm(url, model, render, dict(cache or {}), entry), "warm: the next model call")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        self.log.append(entry)
        for call_id in call_ids:
            self._pending[call_id] = (entry, task)
        while len(self._pending) > MAX_PENDING:
            self._pending.pop(next(iter(self._pending)))

    def next_request_began(self, answered_call_ids: Iterable[str]) -> None:
        """A model request began holding the results of these tool calls: their warm-ups are done or too late."""
        now = time.perf_counter()
        for call_id in answered_call_ids:
            found = self._pending.pop(call_id, None)
            if found is None or found[0]["next_request"] is not None:
                continue
            entry, task = found
            entry["next_request"] = now
            if entry["sent"] is None and not task.done():  # still tokenizing: it would only compete now
                task.cancel()

    async def _warm(self, url: str, model: str, render: Render, cache: dict[str, Any], entry: dict[str, Any]) -> None:
        try:
            budget = await warm_budget(url)
            if budget is None:
                entry["outcome"] = "not warmed: the device rule (a CPU server, or its prefix cache is off)"
                return
            llm = get_llm_engine(url.rstrip("/"), model=model)
            ids = await token_prefix(llm, [render(s) for s in STAND_INS])
            entry["sent"] = time.perf_counter()
            entry["tokens"] = await warm_ids(llm, ids, budget.least, budget.block_size, **cache)
            entry["done"] = time.perf_counter()
            entry["outcome"] = "warmed" if entry["tokens"] else f"not warmed: under {budget.least} shared tokens"
        except asyncio.CancelledError:
            entry["outcome"] = "cancelled: the next request began first"
            raise
        except Exception as exc:  # noqa: BLE001 - a warm-up only ever costs the cache
            entry["outcome"] = f"failed: {type(exc).__name__}"
            log.debug("warming the agent's next model call failed", exc_info=True)

    def summary(self) -> list[str]:
        """One line per recent warm-up, for ``explain()``."""
        lines = []
        for e in list(self.log)[-8:]:
            if e["outcome"] != "warmed":
                lines.append(e["outcome"])
                continue
            line = f"{e['tokens']} tokens warmed in {e['done'] - e['started']:.3f} s"
            if e["next_request"] is not None:
                line += f", {e['next_request'] - e['done']:.3f} s before the next request began"
            lines.append(line)
        return lines
