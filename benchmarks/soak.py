"""Soak: many queries through both adapters, from threads and event loops, checked against stock.

    python -m benchmarks.soak -n 200                         # the shared server at $AYO_LLM_URL
    python -m benchmarks.soak -n 1000 --apps naive_rag search_augmented --max-tokens 32
    python -m benchmarks.soak -n 2000 --apps search_augmented graph sub_question chat --no-stock-baseline

What it does (issue 16, "Soak"): the example apps (``examples/``, plain LlamaIndex / LangChain code)
are built stock and optimized on one set of engines; stock answers every distinct question once, one
at a time (the reference); then N jobs (apps and questions round-robin) go through the optimized apps
from ``--threads`` synchronous caller threads (``run``: ``query``/``invoke``) and ``--loops`` caller
threads each with its own event loop and ``--per-loop`` concurrent coroutines (``arun``: ``acall``/
``ainvoke``). A warm-up of the same mix runs first; resources are sampled after it and at the end.

Before the optimized run, the same jobs go through stock with the same callers: the apps' own growth
(the LlamaIndex apps make and delete a Chroma collection per call, and Chroma keeps each deleted
collection's files open and its index in memory), against which Ayo's growth is read.
``--no-stock-baseline`` leaves that run out (a long soak over apps that make no collection per call,
where the stock side's growth was measured on a shorter run).

Printed and returned: mismatches with stock (the answer text), failures, jobs answered twice or never,
Python memory held after warm-up (tracemalloc, beyond stock's, under ``MAX_HELD_MIB_PER_JOB``; resident memory for the record), threads / file descriptors / tasks on Ayo's loop
before and after, Ayo's engine schedulers' in-flight requests at the end, and the server's own
``vllm:num_requests_running`` + ``waiting`` (on a shared server other users' requests count too: the
minimum over a few seconds is reported). ``--out FILE`` writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import logging
import os
import queue
import re
import sys
import threading
import time
import tracemalloc
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("ayo.soak")
DEFAULT_APPS = ("naive_rag", "search_augmented")
# Memory still allocated after the run (after malloc_trim), beyond what stock's run of the same jobs
# grew, per job: a leak of 1 MiB per job must fail the check however large the process is (a bound in
# per cent of a ~1 GiB process let 50 MiB over 50 jobs through). Measured without a leak: the
# 2,000-job long form grew 0.014 MiB per job; see tests/stress/test_soak.py for the short form.
MAX_GROWTH_MIB_PER_JOB = 0.25
# The check itself reads Python memory still allocated (tracemalloc, traced from the end of the
# warm-up): unlike RSS, it holds no arena slack and no native caches, so stock's and Ayo's runs of
# the same jobs differ by what Ayo's objects hold, and a 1 MiB-per-job leak stands out of a noise
# that RSS put at 128 MiB over 50 jobs (issue 28 item 5). Native memory is still read, as RSS.
MAX_HELD_MIB_PER_JOB = 0.25
# Memory a test makes the optimized side hold per job on purpose, to prove the bound catches a leak.
_INJECTED_LEAK: list[bytearray] = []


@dataclass
class App:
    name: str
    module: Any
    stock: Any
    fast: Any


@dataclass
class Job:
    id: int
    app: str
    item: dict[str, Any]


@dataclass
class Outcome:
    job: int
    app: str
    qid: str
    caller: str
    answer: str | None = None
    error: str | None = None


@dataclass
class Snapshot:
    rss_mib: float
    trimmed_rss_mib: float  # after malloc_trim: what is still allocated (see trimmed_rss_mib)
    traced_mib: float  # Python memory still allocated since tracing started (tracemalloc; 0 untraced)
    fds: int  # not counting files under the Chroma folder (below)
    chroma_fds: int
    tcp_fds: int  # TCP connections (pooled ones included)
    event_loops: int  # epoll descriptors: one per event loop that is not closed (3 fds each)
    threads: int
    loop_tasks: int
    thread_names: list[str] = field(default_factory=list)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def trimmed_rss_mib() -> float:
    """Resident memory after glibc hands its free pages back (``malloc_trim(0)``).

    Memory that Python and the C libraries freed stays resident in glibc's per-thread arenas until
    trimmed; with many caller and worker threads that is tens of MiB that no object holds. The
    trimmed figure is what is still allocated: a leak shows there, arena slack does not.
    """
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the plain figure
        pass
    return rss_mib()


def snapshot(chroma_dir: str) -> Snapshot:
    """Resources of this process after a garbage collection (a settled state, not a peak).

    Files under ``chroma_dir`` are counted apart: Chroma keeps the segment files of a deleted
    collection open (4 per collection; stock leaks them the same way in the apps that make a
    collection per call), which is not Ayo's to fix.
    """
    from ayo_core.runtime import bridge

    gc.collect()
    loop = bridge.loop()
    tasks = asyncio.run_coroutine_threadsafe(_count_tasks(), loop).result(timeout=30)
    names = _settled_thread_names()
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    chroma = sum(1 for t in targets if t.startswith(chroma_dir))
    tcp = _tcp_inodes()
    tcp_fds = sum(1 for t in targets if t.startswith("socket:[") and t[8:-1] in tcp)
    loops = sum(1 for t in targets if t == "anon_inode:[eventpoll]")
    rss = rss_mib()
    traced = tracemalloc.get_traced_memory()[0] / 2**20
    return Snapshot(rss, trimmed_rss_mib(), traced, len(targets) - chroma, chroma, tcp_fds, loops, len(names), tasks, names)


def _settled_thread_names(timeout_s: float = 5.0) -> list[str]:
    """The live threads' names once threads that the collection just told to stop have exited.

    A collection can free objects that own a worker thread (LlamaIndex's chat ``Memory`` keeps an
    ``aiosqlite`` connection, one thread each); those threads end a few milliseconds later. Reading
    before they have would list threads that are already going, so read until two reads agree.
    """
    names = sorted(t.name for t in threading.enumerate())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        again = sorted(t.name for t in threading.enumerate())
        if again == names:
            break
        names = again
    return names


def _tcp_inodes() -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        inodes.update(line.split()[9] for line in lines if len(line.split()) > 9)
    return inodes


def settle() -> None:
    """Wait until finished threads are gone and idle pooled connections have expired.

    Ayo's engine pool keeps a connection per request that was in flight at the busiest moment, for
    ``KEEPALIVE_S`` after its last use (aiohttp checks every ``KEEPALIVE_S``): how many are still open
    right after a burst depends on that burst's peak concurrency, not on a leak. Past that window a
    socket still open is held by something.
    """
    from ayo_core.engines.http_client import KEEPALIVE_S

    time.sleep(2 * KEEPALIVE_S + 1.0)


async def _count_tasks() -> int:
    return len(asyncio.all_tasks()) - 1  # not this one


def server_in_flight(llm_url: str, window_s: float = 5.0) -> int | None:
    """The least ``num_requests_running + waiting`` the server reports over ``window_s`` (None: no metrics)."""
    url = llm_url.rstrip("/").removesuffix("/v1") + "/metrics"
    least: int | None = None
    deadline = time.monotonic() + window_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            return least
        now = sum(float(m) for m in re.findall(r"^vllm:num_requests_(?:running|waiting)\{[^}]*\} ([0-9.e+]+)$",
                                                 text, flags=re.M))
        least = int(now) if least is None else min(least, int(now))
        if least == 0 or time.monotonic() > deadline:
            return least
        time.sleep(0.5)


def ayo_in_flight() -> dict[str, int]:
    """Requests Ayo's engine schedulers hold (waiting or running), and submitted-but-never-ended ones."""
    from ayo_core.runtime import bridge
    from ayo_core.runtime.shared import shared_schedulers

    out = {"waiting": 0, "running": 0, "unaccounted": 0}
    for loop in [bridge.loop(), *_CALLER_LOOPS]:
        if loop.is_closed():
            continue
        for sched in shared_schedulers(loop):
            s = sched.statistics()
            out["waiting"] += s.waiting
            out["running"] += s.running_requests
            out["unaccounted"] += s.submitted - s.finished - s.failed - s.cancelled - s.waiting - s.running_requests
    return out


_CALLER_LOOPS: list[asyncio.AbstractEventLoop] = []


def build_apps(names: list[str], cfg: Any) -> list[App]:
    import importlib

    apps = []
    for name in names:
        module = importlib.import_module(f"ayo_examples.{name}")
        apps.append(App(name, module, module.build_stock(cfg), module.build_optimized(cfg)))
    return apps


def make_jobs(apps: list[App], questions: dict[str, list[dict[str, Any]]], n: int, start: int = 0) -> list[Job]:
    """``n`` jobs, apps and their questions round-robin (so every caller sees every app)."""
    cycles = {a.name: itertools.cycle(questions[a.name]) for a in apps}
    return [Job(start + i, apps[i % len(apps)].name, next(cycles[apps[i % len(apps)].name])) for i in range(n)]


def stock_references(apps: list[App], questions: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], str]:
    """Stock's answer to every distinct question, one call at a time."""
    refs = {}
    for app in apps:
        for item in questions[app.name]:
            refs[(app.name, item["id"])] = app.module.run(app.stock, item)
    return refs


def run_callers(apps: list[App], jobs: list[Job], threads: int, loops: int, per_loop: int,
                side: str = "fast", leak_mib_per_job: float = 0.0) -> list[Outcome]:
    """Every job exactly once through the ``side`` apps (``fast`` or ``stock``): sync caller threads and
    event-loop callers. ``leak_mib_per_job``: memory kept per answered job (a leak injected on purpose,
    written to so it is resident), to test that the memory check fails on it."""
    by_name = {a.name: a for a in apps}
    work: queue.SimpleQueue[Job] = queue.SimpleQueue()
    for job in jobs:
        work.put(job)
    outcomes: list[Outcome] = []
    lock = threading.Lock()

    def take() -> Job | None:
        try:
            return work.get_nowait()
        except queue.Empty:
            return None

    def record(job: Job, caller: str, answer: str | None, error: BaseException | None) -> None:
        out = Outcome(job.id, job.app, job.item["id"], caller, answer, None if error is None else repr(error))
        with lock:
            outcomes.append(out)
            if leak_mib_per_job:
                _INJECTED_LEAK.append(bytearray(b"\x01") * int(leak_mib_per_job * 2**20))

    def sync_caller(k: int) -> None:
        while (job := take()) is not None:
            app = by_name[job.app]
            try:
                record(job, f"thread{k}", app.module.run(getattr(app, side), job.item), None)
            except Exception as exc:  # a failure is a data point: counted and printed
                record(job, f"thread{k}", None, exc)

    async def coroutine_caller(k: int, j: int) -> None:
        while (job := take()) is not None:
            app = by_name[job.app]
            try:
                record(job, f"loop{k}.{j}", await app.module.arun(getattr(app, side), job.item), None)
            except Exception as exc:
                record(job, f"loop{k}.{j}", None, exc)

    def loop_caller(k: int) -> None:
        async def callers() -> None:
            await asyncio.gather(*(coroutine_caller(k, j) for j in range(per_loop)))

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        _CALLER_LOOPS.append(loop)
        try:
            loop.run_until_complete(callers())
        finally:
            _CALLER_LOOPS.remove(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            asyncio.set_event_loop(None)

    workers = [threading.Thread(target=sync_caller, args=(k,), name=f"soak-sync-{k}") for k in range(threads)]
    workers += [threading.Thread(target=loop_caller, args=(k,), name=f"soak-loop-{k}") for k in range(loops)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return outcomes


def check(outcomes: list[Outcome], jobs: list[Job], refs: dict[tuple[str, str], str]) -> dict[str, Any]:
    """Mismatches with stock, failures, and jobs answered twice or never."""
    seen: dict[int, int] = {}
    for o in outcomes:
        seen[o.job] = seen.get(o.job, 0) + 1
    mismatches = [o for o in outcomes if o.error is None and o.answer != refs[(o.app, o.qid)]]
    failures = [o for o in outcomes if o.error is not None]
    return {
        "jobs": len(jobs), "answered": len(outcomes), "mismatches": len(mismatches), "failures": len(failures),
        "answered_twice": sum(1 for c in seen.values() if c > 1), "never_answered": len({j.id for j in jobs} - set(seen)),
        "mismatch_examples": [{"app": o.app, "question": o.qid, "caller": o.caller, "ayo": o.answer,
                               "stock": refs[(o.app, o.qid)]} for o in mismatches[:5]],
        "failure_examples": [{"app": o.app, "question": o.qid, "error": o.error} for o in failures[:5]],
    }


def stock_growth(apps: list[App], jobs: list[Job], threads: int, loops: int, per_loop: int,
                 chroma_dir: str) -> dict[str, Any]:
    """The same jobs through stock with the same callers: what the apps themselves grow (the baseline)."""
    before = snapshot(chroma_dir)
    t0 = time.perf_counter()
    outcomes = run_callers(apps, jobs, threads, loops, per_loop, side="stock")
    elapsed = time.perf_counter() - t0
    settle()
    after = snapshot(chroma_dir)
    return {"rss_growth_pct": 100 * (after.rss_mib / before.rss_mib - 1),
            "trimmed_rss_growth_mib": after.trimmed_rss_mib - before.trimmed_rss_mib,
            "trimmed_rss_growth_pct": 100 * (after.trimmed_rss_mib / before.trimmed_rss_mib - 1),
            "held_mib": after.traced_mib - before.traced_mib, "chroma_fds": [before.chroma_fds, after.chroma_fds],
            "fds": [before.fds, after.fds], "failures": sum(o.error is not None for o in outcomes),
            "throughput_qps": len(jobs) / elapsed if elapsed else 0.0}


def soak(apps: list[App], questions: dict[str, list[dict[str, Any]]], n: int, warmup: int, threads: int, loops: int,
         per_loop: int, llm_url: str, chroma_dir: str, stock_baseline: bool = True,
         leak_mib_per_job: float = 0.0) -> dict[str, Any]:
    """Reference, warm-up, stock baseline, snapshot, the N jobs, snapshot: the figures (module docstring).
    ``leak_mib_per_job``: a leak injected into the optimized side's N jobs (:func:`run_callers`)."""
    from ayo_core.runtime import bridge

    server_before = server_in_flight(llm_url)  # a shared server may be busy with other clients
    t0 = time.perf_counter()
    refs = stock_references(apps, questions)
    t_ref = time.perf_counter() - t0
    warm_jobs = make_jobs(apps, questions, warmup)
    warm = check(run_callers(apps, warm_jobs, threads, loops, per_loop), warm_jobs, refs)
    jobs = make_jobs(apps, questions, n, start=warmup)
    tracing = not tracemalloc.is_tracing()
    if tracing:  # from here on: what warm-up caches hold is not counted, what the jobs keep is
        tracemalloc.start()
    try:
        baseline = stock_growth(apps, jobs, threads, loops, per_loop, chroma_dir) if stock_baseline else None
        before = snapshot(chroma_dir)
        t1 = time.perf_counter()
        result = check(run_callers(apps, jobs, threads, loops, per_loop, leak_mib_per_job=leak_mib_per_job), jobs,
                       refs)
        elapsed = time.perf_counter() - t1
        settle()
        after = snapshot(chroma_dir)
    finally:
        if tracing:
            tracemalloc.stop()
        _INJECTED_LEAK.clear()  # held until the snapshot, like a leak; not past it
    result.update({"stock_baseline": baseline,
                   "chroma_fds": [before.chroma_fds, after.chroma_fds],
        "apps": [a.name for a in apps], "jobs_per_adapter": jobs_per_adapter(apps, jobs), "callers": {"threads": threads, "loops": loops, "per_loop": per_loop},
        "warmup": {"jobs": warmup, **{k: warm[k] for k in ("mismatches", "failures")}},
        "stock_reference_s": t_ref, "soak_s": elapsed, "throughput_qps": n / elapsed if elapsed else 0.0,
        "rss_mib": [before.rss_mib, after.rss_mib], "rss_growth_pct": 100 * (after.rss_mib / before.rss_mib - 1),
        "trimmed_rss_mib": [before.trimmed_rss_mib, after.trimmed_rss_mib],
        "trimmed_rss_growth_pct": 100 * (after.trimmed_rss_mib / before.trimmed_rss_mib - 1),
        "held_mib": after.traced_mib - before.traced_mib,
        "injected_leak_mib_per_job": leak_mib_per_job,
        "fds": [before.fds, after.fds], "tcp_fds": [before.tcp_fds, after.tcp_fds],
        "event_loops": [before.event_loops, after.event_loops], "threads": [before.threads, after.threads],
        "ayo_loop_tasks": [before.loop_tasks, after.loop_tasks],
        "new_threads": sorted(set(after.thread_names) - set(before.thread_names)),
        "ayo_workers": sum(1 for name in after.thread_names if name.startswith(f"{bridge.THREAD_NAME}_")),
        "ayo_in_flight": ayo_in_flight(), "server_in_flight_min": server_in_flight(llm_url),
        "server_in_flight_min_before": server_before,
    })
    return result


def memory_growth(r: dict[str, Any]) -> dict[str, Any]:
    """Ayo's memory growth beyond stock's (its run of the same jobs; none when the baseline was left
    out), per job: Python memory held (tracemalloc), the check, against :data:`MAX_HELD_MIB_PER_JOB`;
    and resident memory after malloc_trim, for the record (:data:`MAX_GROWTH_MIB_PER_JOB` is too near
    its noise to be a check)."""
    baseline = r["stock_baseline"] or {}
    jobs = max(1, r["jobs"])
    ayo = r["trimmed_rss_mib"][1] - r["trimmed_rss_mib"][0]
    stock = max(0.0, baseline.get("trimmed_rss_growth_mib", 0.0))
    held, stock_held = r["held_mib"], max(0.0, baseline.get("held_mib", 0.0))
    held_per_job = (held - stock_held) / jobs
    return {"ayo_growth_mib": ayo, "stock_growth_mib": stock, "growth_mib_per_job": (ayo - stock) / jobs,
            "held_mib": held, "stock_held_mib": stock_held, "held_mib_per_job": held_per_job,
            "bound_mib_per_job": MAX_HELD_MIB_PER_JOB, "ok": held_per_job < MAX_HELD_MIB_PER_JOB}


def jobs_per_adapter(apps: list[App], jobs: list[Job]) -> dict[str, int]:
    """How many of the jobs went through each adapter (an example app names its ``FRAMEWORK``)."""
    framework = {a.name: a.module.FRAMEWORK for a in apps}
    counts: dict[str, int] = {}
    for job in jobs:
        counts[framework[job.app]] = counts.get(framework[job.app], 0) + 1
    return counts


def print_figures(r: dict[str, Any]) -> None:
    print(f"soak: {r['jobs']} jobs over {', '.join(r['apps'])}; callers {r['callers']}; "
          f"{r['soak_s']:.1f} s ({r['throughput_qps']:.2f} q/s); stock reference {r['stock_reference_s']:.1f} s")
    print(f"  answered {r['answered']}  mismatches {r['mismatches']}  failures {r['failures']}  "
          f"answered twice {r['answered_twice']}  never answered {r['never_answered']}")
    print(f"  RSS {r['rss_mib'][0]:.0f} -> {r['rss_mib'][1]:.0f} MiB ({r['rss_growth_pct']:+.2f} %)  "
          f"fds {r['fds'][0]} -> {r['fds'][1]} (TCP {r['tcp_fds'][0]} -> {r['tcp_fds'][1]}, event loops "
          f"{r['event_loops'][0]} -> {r['event_loops'][1]})  threads {r['threads'][0]} -> {r['threads'][1]}  "
          f"tasks on Ayo's loop {r['ayo_loop_tasks'][0]} -> {r['ayo_loop_tasks'][1]}")
    print(f"  after malloc_trim: RSS {r['trimmed_rss_mib'][0]:.0f} -> {r['trimmed_rss_mib'][1]:.0f} MiB "
          f"({r['trimmed_rss_growth_pct']:+.2f} %; the rest is glibc arena slack, not held memory)")
    m = memory_growth(r)
    print(f"  Python memory held per job beyond stock's (tracemalloc): {m['held_mib_per_job']:+.3f} MiB "
          f"(Ayo {m['held_mib']:+.1f}, stock {m['stock_held_mib']:+.1f} MiB; bound {m['bound_mib_per_job']} MiB "
          f"per job: {'ok' if m['ok'] else 'EXCEEDED'})")
    print(f"  resident memory (after malloc_trim) per job beyond stock's: {m['growth_mib_per_job']:+.3f} MiB "
          f"(Ayo {m['ayo_growth_mib']:+.1f}, stock {m['stock_growth_mib']:+.1f} MiB)")
    print(f"  jobs per adapter: {r['jobs_per_adapter']}")
    if (b := r["stock_baseline"]) is not None:
        print(f"  stock, same jobs and callers: RSS {b['rss_growth_pct']:+.2f} % "
              f"(after malloc_trim {b['trimmed_rss_growth_pct']:+.2f} %)  fds {b['fds'][0]} -> {b['fds'][1]}  "
              f"({b['throughput_qps']:.2f} q/s, failures {b['failures']}); Chroma's files of deleted collections: "
              f"stock {b['chroma_fds'][0]} -> {b['chroma_fds'][1]}, Ayo {r['chroma_fds'][0]} -> {r['chroma_fds'][1]}")
    print(f"  in flight at the end: Ayo {r['ayo_in_flight']}, server (min over 5 s) {r['server_in_flight_min']}"
          f" (before the soak: {r['server_in_flight_min_before']})")
    for ex in r["mismatch_examples"] + r["failure_examples"]:
        print(f"  ! {ex}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=200, help="jobs after the warm-up (default 200)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--apps", nargs="+", default=list(DEFAULT_APPS))
    parser.add_argument("--questions", type=int, default=6, help="distinct questions per app")
    parser.add_argument("--threads", type=int, default=4, help="synchronous caller threads")
    parser.add_argument("--loops", type=int, default=2, help="caller threads with their own event loop")
    parser.add_argument("--per-loop", type=int, default=3, help="concurrent coroutines per event loop")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--no-stock-baseline", dest="stock_baseline", action="store_false",
                        help="skip the run of the same jobs through stock (the apps' own growth)")
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    parser.add_argument("--inject-leak-mib", type=float, default=0.0, metavar="MIB",
                        help="keep MIB per optimized job on purpose: the memory check must fail (it is tested)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from ayo_core import serve_llm
    from ayo_examples.common import EnginesConfig, load_questions
    from ayo_examples.search_service import SearchService

    with serve_llm(dtype="float32") as llm_url, SearchService(mode="process") as search:
        cfg = EnginesConfig(llm_url=llm_url, max_tokens=args.max_tokens, search_url=search.url)
        apps = build_apps(args.apps, cfg)
        questions = {a.name: load_questions(a.name, args.questions) for a in apps}
        result = soak(apps, questions, args.n, args.warmup, args.threads, args.loops, args.per_loop, llm_url,
                      cfg.chroma_dir, stock_baseline=args.stock_baseline, leak_mib_per_job=args.inject_leak_mib)
        from ayo_bench import provenance

        outputs = (args.out,) if args.out else ()
        result["provenance"] = provenance.collect(llm_url, started_by_ayo=True, dtype="float32", outputs=outputs)
    print_figures(result)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    clean = result["mismatches"] == result["failures"] == result["never_answered"] == 0
    return 0 if clean and memory_growth(result)["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
