"""Reranker engines: LLM relevance scoring (default) and a sentence-transformers CrossEncoder.

No cross-encoder weights can be had offline, so the default reranker asks the
LLM engine for a relevance score per (query, passage) and parses the first
number of the answer. All passages of one query are scored concurrently, so
vLLM batches them; the prompt puts the query *before* the passage so the
passages of one query share a cached prompt prefix.

This is Ayo's own scorer, for apps that have no reranker of their own to keep.
A stock LlamaIndex ``LLMRerank`` / RankGPT postprocessor keeps its own prompts and
parsing (adapters lower it with the framework's code, never with this prompt).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ayo_core.engines.llm_client import LLMEngine

log = logging.getLogger(__name__)

DEFAULT_SYSTEM = ("You judge how relevant a passage is to a query. Answer with one integer from 0 "
                  "(irrelevant) to 10 (answers the query), and nothing else.")
DEFAULT_USER = "Query: {query}\n\nPassage: {passage}\n\nRelevance (0-10):"
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


@dataclass
class RerankResult:
    """``index`` into the passages given, with its score (higher is more relevant)."""

    index: int
    score: float


def parse_score(text: str, low: float = 0.0, high: float = 10.0, default: float = 0.0) -> float:
    """First number in ``text`` clamped to ``[low, high]``; ``default`` when there is none."""
    match = _NUMBER.search(text)
    if match is None:
        return default
    return min(high, max(low, float(match.group())))


def _ranked(scores: Sequence[float], top_n: int | None) -> list[RerankResult]:
    # Stable sort: equal scores keep the retriever's order.
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [RerankResult(i, float(scores[i])) for i in order[: top_n if top_n is not None else len(order)]]


class LLMReranker:
    """Scores passages for a query with the LLM engine (greedy, a few tokens per passage)."""

    def __init__(self, llm: LLMEngine, system_prompt: str = DEFAULT_SYSTEM, user_template: str = DEFAULT_USER,
                 max_tokens: int = 4, max_passage_chars: int = 2000, priority: int = 0) -> None:
        if "{query}" not in user_template or "{passage}" not in user_template:
            raise ValueError("LLMReranker user_template must contain {query} and {passage}")
        self.llm, self.system_prompt, self.user_template = llm, system_prompt, user_template
        self.max_tokens, self.max_passage_chars, self.priority = max_tokens, max_passage_chars, priority

    def messages(self, query: str, passage: str) -> list[dict[str, str]]:
        """The chat messages sent to score one passage."""
        user = self.user_template.format(query=query, passage=passage[: self.max_passage_chars])
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]

    async def ascore(self, query: str, passages: Sequence[str], priority: int | None = None,
                     **extra: Any) -> list[float]:
        """One score per passage, in the passages' order."""
        if not passages:
            return []
        prio = self.priority if priority is None else priority
        results = await asyncio.gather(*[
            self.llm.chat(self.messages(query, p), max_tokens=self.max_tokens, temperature=0.0, priority=prio,
                          **extra) for p in passages])
        return [parse_score(r.text) for r in results]

    async def arerank(self, query: str, passages: Sequence[str], top_n: int | None = None,
                      **extra: Any) -> list[RerankResult]:
        """Passages ordered by score, best first (ties keep the given order), cut to ``top_n``."""
        return _ranked(await self.ascore(query, passages, **extra), top_n)


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` from a local folder, run off the event loop.

    Calls are serialised by a lock (one model, one forward pass at a time); the
    sigmoid/raw choice follows the model's own config, as ``CrossEncoder.predict`` does.
    """

    def __init__(self, model_path: str | os.PathLike[str], max_batch: int = 32, device: str = "cpu",
                 max_length: int | None = None) -> None:
        self.model_path = Path(model_path).expanduser()
        if not (self.model_path / "config.json").exists():
            raise FileNotFoundError(f"CrossEncoderReranker: {self.model_path} is not a model folder (no config.json). "
                                    "Fix: pass the folder of a sentence-transformers CrossEncoder; no weights "
                                    "are downloaded.")
        self.max_batch, self.device, self.max_length = max_batch, device, max_length
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._model is None:
            from sentence_transformers import CrossEncoder

            self._model = CrossEncoder(str(self.model_path), device=self.device, max_length=self.max_length,
                                       local_files_only=True)
        return self._model

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        with self._lock:
            model = self._load()
            scores = model.predict([(query, p) for p in passages], batch_size=self.max_batch,
                                   show_progress_bar=False, convert_to_numpy=True)
        return [float(s) for s in scores.reshape(len(passages), -1)[:, 0]]

    def rerank(self, query: str, passages: Sequence[str], top_n: int | None = None) -> list[RerankResult]:
        return _ranked(self.score(query, passages), top_n)

    async def ascore(self, query: str, passages: Sequence[str]) -> list[float]:
        return await asyncio.to_thread(self.score, query, passages)

    async def arerank(self, query: str, passages: Sequence[str], top_n: int | None = None) -> list[RerankResult]:
        return await asyncio.to_thread(self.rerank, query, passages, top_n)
