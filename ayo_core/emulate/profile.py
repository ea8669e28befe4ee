"""Deployment profiles: the constants an emulated deployment's timing follows, each with its source.

A profile is a JSON file (``ayo_core/emulate/profiles/NAME.json``, or any path) of this shape::

    {"name": "a100-llama2-7b", "kind": "serving", "device": "cuda", "description": "...",
     "llm":   {"step_base": {"value": 0.0104, "source": "..."}, ...},   # StepModel fields
     "embed": {"fixed_s": {...}, "per_text_s": {...}, "per_token_s": {...}, "max_batch": {...}},
     "hosted": {"ttft_s": {...}, "tpot_s": {...}, "requests_per_minute": {...}},   # kind "hosted" only
     "prefix_block": {"value": 16, "source": "..."}}

Every constant is ``{"value": ..., "source": "..."}``: loading fails on a constant without a
source, so no number reaches a figure unexplained. ``kind`` is ``serving`` (a vLLM-like engine:
continuous batching, :class:`~ayo_core.emulate.step_engine.StepModel`) or ``hosted`` (a provider's
API: time to first token and time per token independent of load, behind a rate limit). ``device``
is what the emulated server reports as its device (``/server_info``), which Ayo's device rule reads.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ayo_core.emulate.step_engine import StepModel

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
KINDS = ("serving", "hosted")


class ProfileError(ValueError):
    """A profile file that cannot be used as it is (the message names the file and the fix)."""


@dataclass(frozen=True)
class EmbedCost:
    """An embedding device: one batch costs ``fixed_s + per_text_s * texts + per_token_s * tokens``;
    at most ``max_batch`` texts share a forward pass."""

    fixed_s: float
    per_text_s: float
    per_token_s: float
    max_batch: int

    def batch_s(self, texts: int, tokens: int) -> float:
        return self.fixed_s + self.per_text_s * texts + self.per_token_s * tokens


@dataclass(frozen=True)
class HostedCost:
    """A hosted API: ``ttft_s`` to the first token and ``tpot_s`` per further token, whatever the
    load; at most ``requests_per_minute`` requests start in any minute (the provider's rate limit)."""

    ttft_s: float
    tpot_s: float
    requests_per_minute: float

    def alone_s(self, completion_tokens: int) -> float:
        return self.ttft_s + self.tpot_s * max(0, completion_tokens - 1)


@dataclass(frozen=True)
class Profile:
    """One loaded profile; ``sources`` maps ``section.field`` to the source of its value."""

    name: str
    kind: str
    device: str
    description: str
    llm: StepModel
    embed: EmbedCost
    hosted: HostedCost | None
    prefix_block: int
    sources: dict[str, str]
    content_hash: str
    path: str

    def llm_alone_s(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        """Zero-load service time of one LLM request on this deployment."""
        if self.hosted is not None:
            return self.hosted.alone_s(completion_tokens)
        return self.llm.alone_s(prompt_tokens, cached_tokens, completion_tokens)

    def embed_batch_s(self, texts: int, tokens: int) -> float:
        """Zero-load service time of one embedding batch on this deployment."""
        return self.embed.batch_s(texts, tokens)

    def describe(self) -> dict[str, Any]:
        """Name, hash and file of the profile, for a results file's provenance."""
        return {"name": self.name, "kind": self.kind, "sha256": self.content_hash, "file": self.path}


def list_profiles() -> list[str]:
    """The names of the profiles shipped with Ayo."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json"))


def profile_path(name_or_path: str | Path) -> Path:
    """The file of a shipped profile's name, or the given path."""
    path = Path(name_or_path)
    if path.suffix == ".json" and path.exists():
        return path
    shipped = PROFILES_DIR / f"{name_or_path}.json"
    if shipped.exists():
        return shipped
    raise ProfileError(f"no deployment profile {str(name_or_path)!r}: use one of {list_profiles()} or the path "
                       f"of a profile JSON file (`ayo emulate calibrate` writes cpu-local)")


def load_profile(name_or_path: str | Path) -> Profile:
    """Load and check a profile (a shipped name such as ``a100-llama2-7b``, or a JSON path)."""
    path = profile_path(name_or_path)
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ProfileError(f"profile {path.name} is not JSON: {exc}") from exc
    kind = data.get("kind")
    if kind not in KINDS:
        raise ProfileError(f"profile {path.name}: kind must be one of {KINDS}, not {kind!r}")
    sources: dict[str, str] = {}
    llm = _section(path, data, "llm", StepModel, sources, required=kind == "serving")
    embed = _section(path, data, "embed", EmbedCost, sources, required=True)
    hosted = _section(path, data, "hosted", HostedCost, sources, required=kind == "hosted")
    block = _constant(path, "prefix_block", data.get("prefix_block"), sources)
    shipped = path.resolve().is_relative_to(PROFILES_DIR)
    return Profile(name=str(data.get("name") or path.stem), kind=kind, device=str(data.get("device") or "cuda"),
                   description=str(data.get("description", "")), llm=llm or StepModel(), embed=embed,
                   hosted=hosted, prefix_block=int(block), sources=sources,
                   content_hash=hashlib.sha256(raw).hexdigest(),
                   path=f"ayo_core/emulate/profiles/{path.name}" if shipped else path.name)


def _section(path: Path, data: dict[str, Any], name: str, cls: type, sources: dict[str, str],
             required: bool) -> Any:
    section = data.get(name)
    if section is None:
        if required:
            raise ProfileError(f"profile {path.name} has no {name!r} section, which its kind needs")
        return None
    known = {f.name for f in fields(cls)}
    if unknown := set(section) - known:
        raise ProfileError(f"profile {path.name}: unknown {name} constants {sorted(unknown)}; known: {sorted(known)}")
    values = {k: _constant(path, f"{name}.{k}", v, sources) for k, v in section.items()}
    try:
        return cls(**values)
    except TypeError as exc:
        raise ProfileError(f"profile {path.name}: section {name!r}: {exc}") from exc


def _constant(path: Path, where: str, entry: Any, sources: dict[str, str]) -> Any:
    if not isinstance(entry, dict) or "value" not in entry or not str(entry.get("source", "")).strip():
        raise ProfileError(f"profile {path.name}: {where} must be {{\"value\": ..., \"source\": \"...\"}}; "
                           f"every constant names its source or the measurement that produced it")
    sources[where] = str(entry["source"])
    return entry["value"]
