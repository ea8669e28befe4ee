"""Routing across LLM replicas.

**Which replica** serves a request: a :class:`Router` chosen by name
(``round_robin``, ``least_outstanding``, ``prefix_affinity``). Routers are pure
bookkeeping over :class:`ReplicaLoad` snapshots: no I/O, no Ray, so the
simulator and the real cluster engine run the very same code. **In which order**
waiting requests are served is the engine scheduler's policy
(:mod:`ayo_core.runtime.policies`, ``program`` among them); the cluster engine
also orders each replica's admission queue by the resulting priority.
"""

from __future__ import annotations

import itertools
import json
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# Prefix blocks: vLLM caches whole token blocks (32 tokens here); text is hashed in blocks of
# characters of about that many tokens, token-id prompts in blocks of 32 ids.
TEXT_BLOCK_CHARS = 128
TOKEN_BLOCK = 32


@dataclass
class ReplicaLoad:
    """What a router knows of one replica (kept by the cluster engine or the simulator)."""

    name: str
    outstanding: int = 0          # requests sent to it, not yet answered
    outstanding_work: float = 0.0  # their estimated work (prompt blocks + max_tokens)
    served: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    alive: bool = True

    @property
    def hit_rate(self) -> float:
        """Share of prompt tokens served from the replica's prefix cache (vLLM ``cached_tokens``)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def prompt_blocks(prompt: Any = None, messages: Sequence[dict[str, Any]] | None = None) -> tuple[int, ...]:
    """Chained hashes of the prompt's leading blocks: two prompts share the first n values exactly
    when they share their first n blocks (the unit vLLM's prefix cache matches)."""
    if messages is not None:
        text = "\x1e".join(f"{m.get('role', '')}\x1f{json.dumps(m.get('content', ''), sort_keys=True)}"
                           for m in messages)
        chunks = [text[i:i + TEXT_BLOCK_CHARS].encode() for i in range(0, len(text), TEXT_BLOCK_CHARS)]
    elif isinstance(prompt, (list, tuple)):
        chunks = [repr(list(prompt[i:i + TOKEN_BLOCK])).encode() for i in range(0, len(prompt), TOKEN_BLOCK)]
    else:
        text = str(prompt or "")
        chunks = [text[i:i + TEXT_BLOCK_CHARS].encode() for i in range(0, len(text), TEXT_BLOCK_CHARS)]
    out, h = [], 0
    for chunk in chunks:
        h = zlib.crc32(chunk, h)
        out.append(h)
    return tuple(out)


class Router(Protocol):
    name: str

    def choose(self, blocks: tuple[int, ...], replicas: Sequence[ReplicaLoad]) -> ReplicaLoad: ...

    def record(self, blocks: tuple[int, ...], replica: ReplicaLoad) -> None: ...

    def forget(self, replica: str) -> None: ...


def _live(replicas: Sequence[ReplicaLoad]) -> list[ReplicaLoad]:
    live = [r for r in replicas if r.alive]
    if not live:
        raise LookupError("no live replica to route to")
    return live


class RoundRobinRouter:
    """Each request to the next live replica in turn (the baseline)."""

    name = "round_robin"

    def __init__(self) -> None:
        self._turn = itertools.count()

    def choose(self, blocks: tuple[int, ...], replicas: Sequence[ReplicaLoad]) -> ReplicaLoad:
        live = _live(replicas)
        return live[next(self._turn) % len(live)]

    def record(self, blocks: tuple[int, ...], replica: ReplicaLoad) -> None:
        pass

    def forget(self, replica: str) -> None:
        pass


class LeastOutstandingRouter(RoundRobinRouter):
    """The live replica with the least outstanding work (ties: fewest requests, then in turn)."""

    name = "least_outstanding"

    def choose(self, blocks: tuple[int, ...], replicas: Sequence[ReplicaLoad]) -> ReplicaLoad:
        live = _live(replicas)
        start = next(self._turn) % len(live)
        rotated = live[start:] + live[:start]
        return min(rotated, key=lambda r: (r.outstanding_work, r.outstanding))


class PrefixAffinityRouter(LeastOutstandingRouter):
    """Send a request where its longest prompt prefix was last sent (its KV blocks are cached
    there), unless that replica is overloaded; else the least-loaded replica.

    Overloaded: more than ``max_imbalance`` x the least-loaded replica's outstanding requests
    plus ``slack`` (bounded-load affinity: a hot prefix family may not pin one replica while
    others idle). The table of prefix blocks is an LRU bounded by ``capacity`` entries.
    """

    name = "prefix_affinity"

    def __init__(self, capacity: int = 200_000, max_imbalance: float = 2.0, slack: int = 4) -> None:
        super().__init__()
        self.capacity, self.max_imbalance, self.slack = capacity, max_imbalance, slack
        self._owner: OrderedDict[int, str] = OrderedDict()

    def choose(self, blocks: tuple[int, ...], replicas: Sequence[ReplicaLoad]) -> ReplicaLoad:
        live = _live(replicas)
        least = super().choose(blocks, live)
        by_name = {r.name: r for r in live}
        for block in reversed(blocks):  # longest cached prefix first
            owner = by_name.get(self._owner.get(block, ""))
            if owner is None:
                continue
            if owner.outstanding <= self.max_imbalance * least.outstanding + self.slack:
                return owner
            break
        return least

    def record(self, blocks: tuple[int, ...], replica: ReplicaLoad) -> None:
        for block in blocks:
            self._owner[block] = replica.name
            self._owner.move_to_end(block)
        while len(self._owner) > self.capacity:
            self._owner.popitem(last=False)

    def forget(self, replica: str) -> None:
        for block in [b for b, owner in self._owner.items() if owner == replica]:
            del self._owner[block]


ROUTERS: dict[str, type] = {"round_robin": RoundRobinRouter, "least_outstanding": LeastOutstandingRouter,
                            "prefix_affinity": PrefixAffinityRouter}


def get_router(router: str | Router) -> Router:
    """The router named ``router`` (or ``router`` itself when it already is one)."""
    if not isinstance(router, str):
        return router
    try:
        return ROUTERS[router]()
    except KeyError:
        raise ValueError(f"unknown replica router {router!r}; valid routers: {', '.join(ROUTERS)}") from None
