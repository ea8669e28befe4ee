"""Where a one-LLM-call app's time goes, stock against Ayo: CPU per process and per thread.

On a 2-core machine the vLLM-CPU server and the app's own process share the cores, so a
second the app's process spends computing while the server decodes is taken from the
server. This probe runs an app's stock and optimized sides in balanced pairs (as
``ayo compare``) and records, for each call, the wall time, the client process's CPU
seconds (all threads, and per thread name), and the server's CPU seconds (its process
tree), so the cause of a difference can be read off rather than guessed.

    python benchmarks/parity_probe.py naive_rag -n 8
    python benchmarks/parity_probe.py naive_rag -n 8 --env AYO_SOME_KNOB=1 --out probe.json

Measured on this machine; a results file carries its commit (``ayo_bench.provenance``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

log = logging.getLogger("parity_probe")


def tree_cpu(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc`` and all its descendants (gone ones are skipped)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each of this process's threads, keyed by Python thread name where known
    (native threads, such as torch's pool, as ``native``), summed per name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = defaultdict(float)
    for t in psutil.Process().threads():
        name = names.get(t.id, "native")
        # group numbered pools ("ThreadPoolExecutor-0_1" -> "ThreadPoolExecutor-0")
        out[name.rsplit("_", 1)[0] if name.startswith("ThreadPoolExecutor") else name] += t.user_time + t.system_time
    return dict(out)


def server_process(llm_url: str) -> psutil.Process:
    """The process listening on the server's port (the vLLM API server; its engine core is a child)."""
    port = int(llm_url.split(":")[-1].split("/")[0])
    for conn in psutil.net_connections("tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            return psutil.Process(conn.pid)
    raise RuntimeError(f"no process listens on port {port} ({llm_url}); start the server there or drop --llm-url")


async def one_call(pair: Any, side: str, item: dict[str, Any], server: psutil.Process) -> dict[str, Any]:
    await pair.cold_cache()
    threads0, cpu0, srv0 = thread_cpu(), time.process_time(), tree_cpu(server)
    elapsed, answer, _ = await pair.timed(side, item)
    srv1, cpu1, threads1 = tree_cpu(server), time.process_time(), thread_cpu()
    per_thread = {k: v - threads0.get(k, 0.0) for k, v in threads1.items() if v - threads0.get(k, 0.0) > 0.005}
    return {"wall_s": elapsed, "client_cpu_s": cpu1 - cpu0, "server_cpu_s": srv1 - srv0,
            "threads": per_thread, "answer": answer}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side in ("stock", "ayo"):
        calls = [r[side] for r in rows]
        names = sorted({n for c in calls for n in c["threads"]})
        out[side] = {
            "wall_s": statistics.median(c["wall_s"] for c in calls),
            "client_cpu_s": statistics.median(c["client_cpu_s"] for c in calls),
            "server_cpu_s": statistics.median(c["server_cpu_s"] for c in calls),
            "threads": {n: statistics.median(c["threads"].get(n, 0.0) for c in calls) for n in names},
        }
    out["ratio_median"] = statistics.median(r["stock"]["wall_s"] / r["ayo"]["wall_s"] for r in rows)
    out["identical"] = sum(r["stock"]["answer"] == r["ayo"]["answer"] for r in rows)
    return out


async def probe(app: str, n: int, llm_url: str) -> dict[str, Any]:
    from ayo_bench import stats
    from ayo_bench.compare import AppPair, probe_cache_reset
    from ayo_examples.common import EnginesConfig, load_questions

    cfg = EnginesConfig(llm_url=llm_url)
    pair = AppPair(app, cfg)
    if pair.ayo is None:
        raise RuntimeError(f"{app}: the optimized app does not build: {pair.ayo_missing}")
    pair.cache_reset_url = await probe_cache_reset(llm_url)
    server = server_process(llm_url)
    questions = load_questions(app, n + 1)
    for side in ("stock", "ayo"):  # warm-up: weights, connections, caches
        await pair.timed(side, questions[0])
    rows = []
    for i, (item, first) in enumerate(zip(questions[1:], stats.first_sides(n, ("stock", "ayo"), 0), strict=False)):
        row: dict[str, Any] = {"id": item["id"], "first": first}
        for side in (("stock", "ayo") if first == "stock" else ("ayo", "stock")):
            row[side] = await one_call(pair, side, item, server)
        log.info("pair %d: stock %.2fs (cpu %.2f, server %.2f)  ayo %.2fs (cpu %.2f, server %.2f)", i,
                 row["stock"]["wall_s"], row["stock"]["client_cpu_s"], row["stock"]["server_cpu_s"],
                 row["ayo"]["wall_s"], row["ayo"]["client_cpu_s"], row["ayo"]["server_cpu_s"])
        rows.append(row)
    return {"app": app, "pairs": rows, "summary": summarize(rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("app")
    parser.add_argument("-n", type=int, default=8, help="pairs (default 8)")
    parser.add_argument("--llm-url", default=None, help="a running server (default: one is started)")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE set before the apps are built")
    parser.add_argument("--out", type=Path, default=None, help="write the per-call records here (JSON)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for pair in args.env:
        name, _, value = pair.partition("=")
        os.environ[name] = value
    from ayo_bench import provenance
    from ayo_core.engines.llm_server import serve_llm

    with contextlib.ExitStack() as stack:
        url = args.llm_url or stack.enter_context(serve_llm(dtype="float32", reuse_env=False))
        result = asyncio.run(probe(args.app, args.n, url))
    result["env"] = args.env
    result["provenance"] = {**provenance.code_state(), "machine": provenance.machine()}
    s = result["summary"]
    for side in ("stock", "ayo"):
        print(f"{side:5}: wall {s[side]['wall_s']:.2f}s  client cpu {s[side]['client_cpu_s']:.2f}s  "
              f"server cpu {s[side]['server_cpu_s']:.2f}s")
        for name, sec in sorted(s[side]["threads"].items(), key=lambda kv: -kv[1]):
            print(f"         {name:32} {sec:.3f}s")
    print(f"ratio (median of pairs) {s['ratio_median']:.3f}; identical {s['identical']}/{len(result['pairs'])}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
