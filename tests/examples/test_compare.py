"""The comparison harness on fake apps (offline): pairing, statistics, load, plots, README table."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ayo_bench import bound, compare
from ayo_bench.plot import plot_result
from ayo_bench.timeline import Recorder, spans_from_trace
from ayo_core.caller_code import running_ayo_code
from ayo_core.trace import report_started
from benchmarks import readme_table


class FakeTrace:
    """An Ayo trace of a call that embeds for half its time, then decodes (times on time.monotonic())."""

    def __init__(self, latency: float, start: float = 100.0) -> None:
        self.latency, self.start, self.end = latency, start, start + latency
        self.overhead = {"build": 0.001, "passes": 0.001}
        half = start + latency / 2
        self.nodes = [SimpleNamespace(op="embed", node="embed", engine="embed", start=start, end=half, queued=0.0),
                      SimpleNamespace(op=SimpleNamespace(value="DECODE"), node="decode", engine="llm", start=half,
                                      end=self.end, queued=0.0)]
        self.engine_calls = [SimpleNamespace(engine="embed", start=start, end=half),
                             SimpleNamespace(engine="llm", start=half, end=self.end)]


class FakeApp:
    def __init__(self, delay: float, traced: bool) -> None:
        self.delay, self.traced, self.last_trace = delay, traced, None

    async def answer(self, item: dict[str, Any]) -> str:
        start = time.monotonic()
        await asyncio.sleep(self.delay)
        if self.traced:  # as Ayo's runtime does: the trace goes to the caller's collect_traces block
            self.last_trace = FakeTrace(time.monotonic() - start, start)
            report_started(self.last_trace)
        return f"answer to {item['id']}"


class FakeConversation:
    """An app whose call makes three of Ayo's queries (a chat engine's turns), with no last_trace."""

    async def answer(self, item: dict[str, Any]) -> str:
        for _ in range(3):
            with running_ayo_code():  # as Ayo's hop to its loop: its hook's time is Ayo's
                await asyncio.sleep(0.003)  # the hook before the graph
                start = time.monotonic()
                await asyncio.sleep(0.004)
                report_started(FakeTrace(time.monotonic() - start, start))
            await asyncio.sleep(0.002)  # between turns: the caller's own code, outside Ayo's graphs
        return f"answer to {item['id']}"


def fake_pair(with_ayo: bool = True) -> compare.AppPair:
    pair = compare.AppPair.__new__(compare.AppPair)
    pair.name = "fake"
    pair.module = SimpleNamespace(FRAMEWORK="langchain", arun=lambda app, item: app.answer(item))
    pair.stock = FakeApp(0.02, traced=False)
    pair.ayo = FakeApp(0.01, traced=True) if with_ayo else None
    pair.ayo_missing = "" if with_ayo else "No module named 'ayo_fake'"
    return pair


QUESTIONS = [{"id": f"q{i}", "question": f"question {i}"} for i in range(6)]


def test_statistics_helpers() -> None:
    assert compare.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert compare.percentile([5.0], 95) == 5.0
    assert compare.percentile([], 50) != compare.percentile([], 50)  # NaN
    assert compare.first_difference("abcd", "abXd") == 2
    assert compare.first_difference("abc", "abcdef") == 3


def test_latency_run_alternates_and_summarizes(capsys: pytest.CaptureFixture[str]) -> None:
    out = asyncio.run(compare.run_latency(fake_pair(), QUESTIONS, warmup=1))
    rows, s = out["pairs"], out["summary"]
    firsts = [r["first"] for r in rows]
    assert firsts.count("stock") == firsts.count("ayo") == 3  # balanced, in a seeded random order
    assert firsts == compare.stats.first_sides(6, ("stock", "ayo"), 0)
    assert s["n"] == 6 and s["all_identical"] and s["identical_answers"] == 6
    assert 1.3 < s["median_ratio"] < 3.0
    assert s["ayo_median_s"] < s["stock_median_s"]
    # the busiest engine (embed or llm: half the call each) was in flight for half the call: a
    # utilization of Ayo's schedule (no recorder, no service model: no lower bound)
    assert s["utilization_median"] == pytest.approx(0.5, abs=0.1) and "lower_bound_median_s" not in s
    assert s["gap_median_s"]["other_engine"] == pytest.approx(s["gap_median_s"]["gap"], abs=0.002)
    assert 0 <= s["ayo_overhead_median_s"] < 0.01 and s["ayo_overhead_recorded_median_s"] == pytest.approx(0.002)
    compare.print_latency("fake", s, "")
    printed = capsys.readouterr().out
    assert "busiest engine in flight" in printed and "not a bound" in printed
    assert "lower bound (any schedule): not measured" in printed
    ci = s["ratio_interval"]
    assert ci["n"] == 6 and ci["ci95_low"] <= ci["geomean"] <= ci["ci95_high"]
    assert f"95 % interval {ci['ci95_low']:.2f}x-{ci['ci95_high']:.2f}x over 6 pairs: {ci['verdict']}" in printed
    assert s["balanced_ratio"] == pytest.approx((s["median_ratio_stock_first"] * s["median_ratio_ayo_first"]) ** 0.5)


def test_a_call_of_several_queries_is_measured_over_all_of_them() -> None:
    pair = fake_pair()
    pair.stock = FakeApp(0.03, traced=False)
    pair.ayo = FakeConversation()
    out = asyncio.run(compare.run_latency(pair, QUESTIONS[:2], warmup=0))
    row = out["pairs"][0]
    assert row["ayo_trace"]["queries"] == 3
    b = row["ayo_utilization"]
    # each turn's engine busy half its graph; the time between turns is outside Ayo's graphs
    assert b["outside_graph_s"] >= 0.013 and b["busy_s"] > 0
    assert b["busy_s"] + b["gap_s"] == pytest.approx(b["latency_s"])
    # between turns is the caller's code (stock runs it too): Ayo's overhead is its hooks' 3 x 3 ms
    assert b["caller_code_s"] >= 0.004 and b["outside_graph_s"] - b["caller_code_s"] >= 0.009
    assert row["ayo_overhead_s"] == pytest.approx(b["outside_graph_s"] - b["caller_code_s"] + b["runtime_s"])
    assert row["ayo_overhead_upper_s"] - row["ayo_overhead_s"] == pytest.approx(b["caller_code_s"])
    assert out["summary"]["utilization_median"] < 0.6


def test_a_call_with_no_ayo_query_gets_the_servers_bound_but_no_overhead(capsys: pytest.CaptureFixture[str]) -> None:
    class Recorder:  # the LLM server's own view: one request over the middle half of every call
        def between(self, lo: float, hi: float) -> list[dict[str, Any]]:
            q = (hi - lo) / 4
            return [{"start": lo + q, "end": hi - q, "completion_tokens": 8}]

    pair = fake_pair()
    pair.ayo = FakeApp(0.01, traced=False)  # an agent under ainvoke: its model node stays stock's
    pair.recorder = Recorder()
    s = asyncio.run(compare.run_latency(pair, QUESTIONS[:4], warmup=0))["summary"]
    assert s["utilization_engine"] == "llm server (recorded)"
    assert s["utilization_median"] == pytest.approx(0.5, abs=0.05)
    assert "ayo_overhead_median_s" not in s
    compare.print_latency("fake", s, "")
    assert "ayo overhead: not measured" in capsys.readouterr().out


def test_time_outside_the_graph_is_gap_not_bound() -> None:
    # a doc-QA call: 6 s of the function's own code, then a 4 s graph whose LLM is busy 3.6 s of it
    trace = FakeTrace(4.0, start=106.0)
    trace.engine_calls = [SimpleNamespace(engine="llm", start=106.2, end=109.8)]
    report = bound.busiest_engine_bound(bound.work_from_trace(trace, (100.0, 110.0)))
    assert report.busy_s == pytest.approx(3.6) and report.efficiency == pytest.approx(0.36)
    assert report.outside_graph_s == pytest.approx(6.0) and report.gap_s == pytest.approx(6.4)


def test_balanced_ratio_cancels_the_second_runner_advantage() -> None:
    rows = [{"first": "stock", "ratio": 1.28}, {"first": "ayo", "ratio": 0.78}] * 3
    assert compare.balanced_ratio(rows) == pytest.approx(1.0, abs=0.01)
    assert compare.balanced_ratio([{"first": "stock", "ratio": 1.2}]) == pytest.approx(1.2)


def test_latency_run_without_adapter_measures_stock_only() -> None:
    out = asyncio.run(compare.run_latency(fake_pair(with_ayo=False), QUESTIONS[:2], warmup=0))
    assert "ayo_median_s" not in out["summary"] and out["summary"]["n"] == 2


def test_open_loop_load_reports_both_sides() -> None:
    out = asyncio.run(compare.run_load(fake_pair(), QUESTIONS, rate=50.0, warmup=0, seed=1))
    for side in ("stock", "ayo"):
        s = out[side]["summary"]
        assert s["completed"] == 6 and s["errors"] == 0 and s["throughput_qps"] > 0
        assert s["p95_s"] >= s["p50_s"] > 0
    assert out["all_identical"]


def test_recorder_drops_spans_that_wrap_llm_calls() -> None:
    rec = Recorder()
    rec.spans = [{"stage": "search", "label": "multiquery", "start": 0.0, "end": 2.0},
                 {"stage": "llm", "label": "chat", "start": 0.1, "end": 1.5},
                 {"stage": "search", "label": "web", "start": 1.5, "end": 1.9}]
    assert [s["label"] for s in rec.stage_spans()] == ["chat", "web"]
    spans = spans_from_trace(FakeTrace(1.0))
    assert [s["stage"] for s in spans] == ["embed", "llm"] and spans[0]["start"] == 0.0


def test_results_plot_and_readme_table(tmp_path: Path) -> None:
    pair = fake_pair()
    latency = asyncio.run(compare.run_latency(pair, QUESTIONS[:2], warmup=0))
    meta = {"date": "2026-01-01T00:00:00Z", "machine": {"cpu": "test cpu", "cores": 2}, "model": "m",
            "max_tokens": 64, "search_latency_s": 0.3}
    timeline = {"question": "q0", "stock_s": 0.02, "ayo_s": 0.01,
                "stock": [{"stage": "llm", "label": "chat", "start": 0.0, "end": 0.02}],
                "ayo": spans_from_trace(FakeTrace(0.01))}
    path = tmp_path / "fake.json"
    path.write_text(json.dumps({**meta, "app": "fake", **latency, "timeline": timeline}))
    load = asyncio.run(compare.run_load(pair, QUESTIONS[:2], rate=50.0, warmup=0, seed=0))
    (tmp_path / "fake-load.json").write_text(json.dumps({**meta, "app": "fake", "load": load}))
    assert plot_result(path).stat().st_size > 1000
    assert plot_result(tmp_path / "fake-load.json").stat().st_size > 1000
    table = readme_table.render(tmp_path)
    assert "| fake | 2 |" in table and "test cpu" in table and "throughput stock / Ayo" in table
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{readme_table.START}\nold\n{readme_table.END}\noutro\n")
    readme_table.update(readme, table)
    assert "old" not in readme.read_text() and "| fake | 2 |" in readme.read_text()


def test_cli_arguments() -> None:
    args = compare.parse_args(["advanced_rag", "--mode", "load", "--rate", "0.25", "-n", "4"])
    assert (args.app, args.mode, args.rate, args.n) == ("advanced_rag", "load", 0.25, 4)
    with pytest.raises(SystemExit):
        compare.parse_args(["no_such_app"])


def test_a_failing_optimized_run_is_counted_not_hidden() -> None:
    pair = fake_pair()

    async def broken(item: dict[str, Any]) -> str:
        raise RuntimeError("adapter bug")

    pair.ayo.answer = broken  # type: ignore[union-attr]
    out = asyncio.run(compare.run_latency(pair, QUESTIONS[:3], warmup=1))
    s = out["summary"]
    assert s["ayo_errors"] == 3 and s["stock_errors"] == 0 and "ayo_median_s" not in s
    assert all("adapter bug" in r["ayo_error"] for r in out["pairs"])
    compare.print_latency("fake", s, "")  # must not raise


def test_results_go_outside_the_repository_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Path(__file__).resolve().parents[2]
    assert not compare.default_results_dir().resolve().is_relative_to(repo)
    monkeypatch.setenv("AYO_HOME", str(tmp_path))
    assert compare.default_results_dir() == tmp_path / "results"
    assert compare.parse_args(["naive_rag"]).out == str(tmp_path / "results")
    assert compare.parse_args(["naive_rag", "--out", "benchmarks/results"]).out == "benchmarks/results"


def test_load_level_pairs_each_query_with_its_stock_run() -> None:
    from benchmarks import load

    pair = fake_pair()
    pair.cache_reset_url = None
    out = asyncio.run(load.run_level(pair, QUESTIONS, rate=40.0, duration=0.1, seed=3, order=["stock", "ayo"],
                                     engine_names=["fake"]))
    paired = out["paired"]
    assert paired["n"] == out["queries"] == out["compared_answers"]
    # the fake stock app takes 0.02 s and the fake Ayo app 0.01 s: every query is about twice as fast
    assert 1.3 < paired["median"] < 3.0 and paired["ayo_slower_share"] < 0.5
    assert set(out["ayo"]["latency_by_id"]) == set(out["stock"]["latency_by_id"])


def test_the_bound_reads_the_search_services_log_of_each_call() -> None:
    """Each Ayo call's window goes to the search log (its searches then count their declared latency in
    the bound); a log that cannot be read leaves the bound as without one, with a warning."""
    class Recorder:
        def between(self, lo: float, hi: float) -> list[dict[str, Any]]:
            return [{"start": lo + (hi - lo) / 2, "end": hi, "completion_tokens": 8}]

    asked: list[tuple[float, float]] = []

    def search_log(lo: float, hi: float) -> list[dict[str, float]]:
        asked.append((lo, hi))
        return [{"start": lo, "end": lo + (hi - lo) / 2, "latency_s": (hi - lo) / 2}]  # the whole embed half

    pair = fake_pair()
    pair.recorder, pair.search_log = Recorder(), search_log
    rows = asyncio.run(compare.run_latency(pair, QUESTIONS[:2], warmup=0))["pairs"]
    assert len(asked) == len(rows)
    assert all(r["lower_bound"]["critical_path_s"] >= (hi - lo) / 2 for r, (lo, hi) in zip(rows, asked, strict=True))

    def broken(lo: float, hi: float) -> list[dict[str, float]]:
        raise OSError("connection refused")

    pair.search_log = broken
    assert compare.searches_in(pair, (0.0, 1.0)) is None
