"""Engine figures in one run, printed as one JSON line.

LLM prefill and decode tok/s at batch 1 and 8 (through LLMEngine, i.e. vLLM's
HTTP API), embedding chunks/s at batch 1 and 32, Chroma query ms over 2,000
vectors. Uses ``AYO_LLM_URL`` when set, else starts a server with ``serve_llm``.

    .venv/bin/python benchmarks/engines.py [--repeats 3] [--out FILE]

Every prefill prompt starts with a fresh random tag so prefix caching cannot
serve it; decode runs use ``ignore_eos`` so each request makes exactly
``--decode-tokens`` tokens. Each figure is the median over ``--repeats`` runs.
The machine is shared (2 cores): read the figures as orders of magnitude.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ayo_core.engines import EmbeddingEngine, LLMEngine, VectorStoreEngine, serve_llm  # noqa: E402

FILLER = ("Ayo lowers every module of a retrieval pipeline into primitives and schedules them on shared engines. "
          "Independent branches run in parallel while the language model prefills what it already knows. ")


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 2)


def _prompt(words: int) -> str:
    text = (FILLER * (words // len(FILLER.split()) + 1)).split()[:words]
    return f"[{uuid.uuid4().hex}] " + " ".join(text)


async def _timed(make: Callable[[], Awaitable[list[Any]]]) -> tuple[float, list[Any]]:
    t0 = time.perf_counter()
    out = await make()
    return time.perf_counter() - t0, out


async def llm_figures(llm: LLMEngine, repeats: int, prompt_words: int, decode_tokens: int) -> dict[str, float]:
    await llm.complete("warm up", max_tokens=4)
    figures: dict[str, float] = {}
    for batch in (1, 8):
        prefill, decode = [], []
        for _ in range(repeats):
            seconds, res = await _timed(lambda b=batch: asyncio.gather(
                *[llm.prefill(_prompt(prompt_words)) for _ in range(b)]))
            prefill.append(sum(r.prompt_tokens - r.cached_tokens for r in res) / seconds)
            seconds, res = await _timed(lambda b=batch: asyncio.gather(
                *[llm.complete(_prompt(8), max_tokens=decode_tokens, ignore_eos=True) for _ in range(b)]))
            decode.append(sum(r.completion_tokens for r in res) / seconds)
        figures[f"llm_prefill_tok_s_b{batch}"] = _median(prefill)
        figures[f"llm_decode_tok_s_b{batch}"] = _median(decode)
    figures["llm_prefill_prompt_tokens"] = float((await llm.prefill(_prompt(prompt_words))).prompt_tokens)
    return figures


def embedding_figures(repeats: int, chunks: int, threads: int) -> dict[str, float]:
    engine = EmbeddingEngine(max_batch=32, torch_threads=threads)
    # ~100-word chunks, like a text splitter's output
    texts = [_prompt(100) for _ in range(chunks)]
    engine.embed(texts[:4])  # load the model, warm up
    figures: dict[str, float] = {}
    for batch in (1, 32):
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for i in range(0, chunks, batch):
                engine.embed(texts[i:i + batch])
            rates.append(chunks / (time.perf_counter() - t0))
        figures[f"embed_chunks_s_b{batch}"] = _median(rates)
    engine.close()
    figures["embed_torch_threads"] = threads
    return figures


def chroma_figures(n: int = 2000, dim: int = 384, queries: int = 50, k: int = 4) -> dict[str, float]:
    import numpy as np

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, dim)).astype("float32")
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = VectorStoreEngine(path=tmp)
        store.add("bench", [str(i) for i in range(n)], vectors.tolist(), [f"doc {i}" for i in range(n)])
        qs = rng.standard_normal((queries, dim)).tolist()
        store.query("bench", qs[:1], k=k)  # load the index
        times = []
        for q in qs:
            t0 = time.perf_counter()
            store.query("bench", [q], k=k)
            times.append((time.perf_counter() - t0) * 1000)
        store.close()
    return {"chroma_query_ms_2000": round(statistics.median(times), 3), "chroma_query_p95_ms_2000":
            round(sorted(times)[int(0.95 * len(times)) - 1], 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompt-words", type=int, default=400, help="prefill prompt length (~1.3 tokens/word)")
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--chunks", type=int, default=64, help="embedding chunks per measurement")
    parser.add_argument("--embed-threads", type=int, default=1, help="EmbeddingEngine torch_threads (default 1)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON line to this file")
    args = parser.parse_args(argv)
    from ayo_bench import provenance

    figures: dict[str, Any] = {"machine_cores": os.cpu_count()}
    given = bool(os.environ.get("AYO_LLM_URL"))  # serve_llm yields it as is
    with serve_llm(dtype="float32") as url:
        figures["llm_url"] = url
        figures["provenance"] = provenance.collect(url, started_by_ayo=not given, dtype="float32")
        figures.update(asyncio.run(llm_figures(LLMEngine(url), args.repeats, args.prompt_words, args.decode_tokens)))
    figures.update(embedding_figures(args.repeats, args.chunks, args.embed_threads))
    figures.update(chroma_figures())
    line = json.dumps(figures, sort_keys=True)
    print(line, flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
