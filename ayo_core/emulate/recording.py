"""Recorded answers of the real engines, replayed exactly (``ayo emulate``'s store).

A model request is recorded as the real server streamed it: each chunk's choice (delta or text,
tool-call deltas included) with the number of completion tokens produced up to it (vLLM's
``continuous_usage_stats``), the finish and stop reasons, the prompt's token count and ids (ids
for the emulated prefix cache). Its key is the request body without what changes only how the
answer is delivered or how far it goes (``stream``, ``stream_options``, ``max_tokens``,
``priority``...): so one recording serves a streamed and a non-streamed request alike, and a
request cut shorter (a smaller ``max_tokens``; an early stop, which hangs up) replays the
recorded prefix. A recording that ended by length, or that the client cut off, covers only up
to its tokens: a request for more is a miss. Other JSON endpoints (``/tokenize``) are recorded as
(status, body) per exact request, embeddings as one vector per (model, text).

The store is a JSON-lines file, appended to as it records, read whole at start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Fields that change only how (or how far) an answer is delivered, never its tokens.
DELIVERY_FIELDS = frozenset({"stream", "stream_options", "max_tokens", "max_completion_tokens", "priority",
                             "user", "request_id", "store", "metadata"})


def without_delivery(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without its delivery fields (what an exact request is keyed by)."""
    return {k: v for k, v in body.items() if k not in DELIVERY_FIELDS}


def request_key(path: str, body: dict[str, Any]) -> str:
    """The key of a model request: endpoint and body without its delivery fields."""
    content = {k: v for k, v in body.items() if k not in DELIVERY_FIELDS}
    text = json.dumps([path, content], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def exact_key(path: str, body: Any) -> str:
    text = json.dumps([path, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Recording:
    """One model answer: ``chunks`` are ``[choice, tokens so far]`` pairs in stream order."""

    path: str
    chunks: list[list[Any]]
    prompt_tokens: int
    prompt_ids: list[int]
    finish_reason: str | None  # None: the client hung up before the end (a prefix)
    stop_reason: Any = None
    extras: dict[str, Any] = field(default_factory=dict)  # system_fingerprint, the server's model name

    @property
    def tokens(self) -> int:
        return int(self.chunks[-1][1]) if self.chunks else 0

    @property
    def complete(self) -> bool:
        """The answer's natural end is known (it stopped, rather than reached a limit or was cut)."""
        return self.finish_reason not in (None, "length")

    def covers(self, max_tokens: int | None) -> bool:
        """Whether this recording has the whole answer to a request for ``max_tokens``."""
        if self.complete:
            return True
        return max_tokens is not None and max_tokens <= self.tokens

    def served(self, max_tokens: int | None) -> tuple[list[list[Any]], str, Any]:
        """The chunks a request for ``max_tokens`` gets, its finish reason and stop reason."""
        if max_tokens is None or max_tokens >= self.tokens:
            if self.complete:
                return self.chunks, str(self.finish_reason), self.stop_reason
            return self.chunks, "length", None
        return [c for c in self.chunks if c[1] <= max_tokens], "length", None


class RecordStore:
    """Recordings by key, kept in memory and appended to ``path`` (JSON lines) as they are made."""

    def __init__(self, path: Path | str | None) -> None:
        self.path = Path(path) if path else None
        self.models: dict[str, Recording] = {}
        self.exact: dict[str, tuple[int, Any]] = {}
        self.vectors: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():
            self._load(self.path)

    def _load(self, path: Path) -> None:
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    log.warning("%s line %d is not JSON (a run cut off while writing?): skipped", path, n)
                    continue
                self._apply(row)
        log.info("loaded %d model answers, %d other answers, %d vectors from %s",
                 len(self.models), len(self.exact), len(self.vectors), path)

    def _apply(self, row: dict[str, Any]) -> None:
        kind, key = row["kind"], row["key"]
        if kind == "model":
            rec = Recording(**row["recording"])
            old = self.models.get(key)
            if old is None or rec.complete or (not old.complete and rec.tokens > old.tokens):
                self.models[key] = rec  # keep the recording that covers the most
        elif kind == "exact":
            self.exact[key] = (row["status"], row["body"])
        elif kind == "vector":
            self.vectors[key] = row["vector"]

    def _append(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._apply(row)
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row, separators=(",", ":")) + "\n")

    def add_model(self, key: str, rec: Recording) -> None:
        self._append({"kind": "model", "key": key, "recording": asdict(rec)})

    def add_exact(self, key: str, status: int, body: Any) -> None:
        self._append({"kind": "exact", "key": key, "status": status, "body": body})

    def add_vector(self, model: str, text: str, vector: list[float]) -> None:
        self._append({"kind": "vector", "key": vector_key(model, text), "vector": vector})

    def vector(self, model: str, text: str) -> list[float] | None:
        return self.vectors.get(vector_key(model, text))


def vector_key(model: str, text: str) -> str:
    return hashlib.sha256(json.dumps([model, text], ensure_ascii=False).encode()).hexdigest()
