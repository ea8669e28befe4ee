"""``EngineSet``: which engine kind (scheduler) serves each distinct model of one pipeline.

Every adapter does the same with the models it recognizes: one engine per distinct model (an LLM
endpoint, an embedding setting), named by family in the order met (``llm``, ``llm1``, ...,
``embed``, ``embed1``, ...: traces and explain() show these names), and LLM schedulers that admit
the adapter's in-flight limit. The adapter keeps what is its framework's: which key identifies a
model, the factory that makes (or finds, in the process's registry) its engine, and its default
in-flight number (they differ by adapter, and a scheduler's limit changes timing).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from ayo_core.runtime.engine_scheduler import SchedulerConfig
from ayo_core.runtime.scheduler import Runtime
from ayo_core.runtime.shared import llm_config, shared_runtime

LLM = "llm"  # the family whose schedulers get the in-flight limit (vLLM batches what is in flight)
EMBED = "embed"


class EngineSet:
    """The engines of one pipeline by kind, one per distinct key within a family.

    ``kind(family, key, make)`` names the engine serving ``key`` (``make()`` runs only for a key not
    seen yet, so asking again is a dict lookup); ``engines`` maps kind -> engine, as ``Runtime`` and
    :func:`~ayo_core.runtime.shared_runtime` take them. The in-flight limit is passed where the
    schedulers are configured, not here: an engine set is made when a pipeline is captured, the
    limit comes with the options the runtime is asked under.
    """

    def __init__(self) -> None:
        self.engines: dict[str, Any] = {}
        self._kinds: dict[str, dict[Hashable, str]] = {}

    def kind(self, family: str, key: Hashable, make: Callable[[], Any]) -> str:
        """The kind serving ``key`` in ``family``: the family's first key is ``family``, the next
        ``family1``, ...; a new key's engine is ``make()``."""
        kinds = self._kinds.setdefault(family, {})
        kind = kinds.get(key)
        if kind is None:
            kind = family if not kinds else f"{family}{len(kinds)}"
            self.engines[kind] = make()  # before naming it: a failed make leaves no kind without an engine
            kinds[key] = kind
        return kind

    def kind_of(self, family: str, key: Hashable) -> str | None:
        """The kind already serving ``key`` in ``family`` (None: none does)."""
        return self._kinds.get(family, {}).get(key)

    def configs(self, llm_inflight: int) -> dict[str, SchedulerConfig]:
        """Scheduler configs per kind: every LLM kind admits ``llm_inflight`` requests; the other
        kinds keep the scheduler's defaults."""
        return {kind: llm_config(llm_inflight) for kind in self._kinds.get(LLM, {}).values()}

    def shared_runtime(self, policy: str, llm_inflight: int) -> Runtime:
        """The process's shared ``Runtime`` over exactly these engines on the running loop (one per
        engine set and policy: other pipelines on the same engines meet in its schedulers)."""
        return shared_runtime(self.engines, policy, configs=self.configs(llm_inflight))
