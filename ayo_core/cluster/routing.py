"""Routing across LLM replicas, and the program-level engine-scheduler policy.

Two decisions, two places:

- **Which replica** serves a request: a :class:`Router` chosen by name
  (``round_robin``, ``least_outstanding``, ``prefix_affinity``). Routers are pure
  bookkeeping over :class:`ReplicaLoad` snapshots: no I/O, no Ray, so the
  simulator and the real cluster engine run the very same code.
- **In which order** waiting requests are served: the engine scheduler's policy.
  :class:`ProgramPolicy` (``program``) ranks a request by the service its *query*
  has already received (least attained service first, the program-level
  scheduling of workflow-aware LLM schedulers), then by its slack on the query's
  critical path, so a short query is not stuck behind a long one under load.
  The cluster engine also orders each replica's admission queue by the
  resulting priority.
"""

from __future__ import annotations

import itertools
import json
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ayo_core.runtime.engine_scheduler import EngineRequest

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


# Slack weighs a tenth of attained service: service received decides, the critical path breaks ties.
SLACK_WEIGHT = 0.1


def attained_service(req: EngineRequest) -> float:
    """Engine seconds the request's query has received so far (from its trace).

    Summed incrementally: a trace only grows, so the sum is cached on the trace with the
    number of calls it covers (the policy ranks every waiting request at every step).
    """
    trace = req.trace
    if trace is None:
        return 0.0
    calls = trace.engine_calls
    done, total = getattr(trace, "_ayo_attained", (0, 0.0))
    if done > len(calls):
        done, total = 0, 0.0
    for c in calls[done:]:
        total += c.end - c.start
    trace._ayo_attained = (len(calls), total)  # type: ignore[attr-defined]  # our own cache on our own Trace
    return total


class ProgramPolicy:
    """``program``: least attained service per *query* first, then least critical-path slack.

    A query that has already received much engine time (a long agent loop, a tree summary)
    yields to queries that received little, so short queries finish first under load
    without starving anyone forever (a waiting query attains nothing, a running one does).
    """

    name = "program"

    def key(self, req: EngineRequest) -> tuple:
        return (round(attained_service(req), 3), round(req.slack, 6), req.query_start, req.seq)

    def priority(self, req: EngineRequest) -> int:
        return int(1000 * (attained_service(req) + SLACK_WEIGHT * req.slack))  # ms: vLLM wants an int
