"""The lower bound as ``ayo compare`` reports it (per call, summary, printout) and as the README table
renders it, new results and results measured before it alike. Fake engines on a virtual clock."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ayo_bench import compare
from ayo_bench.service_model import StepServiceModel
from ayo_core.runtime import Runtime
from ayo_core.runtime.clock import run_virtual
from ayo_core.runtime.context import Engines
from benchmarks import readme_table
from tests.ayo_bench.test_lower_bound import STEP, RecordedServingLLM, graph_of, llm_node


class Rows:
    """The recorder's interface call_figures reads: ``between`` and ``records``."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.records = rows

    def between(self, lo: float, hi: float) -> list[dict[str, Any]]:
        return [r for r in self.records if lo <= r["start"] <= hi]


def chain_call(service: Any, earlier_run: bool = False) -> tuple[dict[str, Any], float]:
    """call_figures of one chain query (its only schedule is Ayo's), and its latency; ``earlier_run``:
    the recorder also holds the same requests from a run before the call (stock's, 10 % slower)."""
    async def main() -> tuple[Any, list[dict[str, Any]]]:
        llm = RecordedServingLLM(STEP)
        g = graph_of([llm_node("a", 40, 6), llm_node("b", 90, 10, ("a",))], "b")
        _, trace = await Runtime(Engines(llm=llm), inline_sync=True).run(g, {})
        return trace, llm.rows

    trace, rows = run_virtual(main)
    if earlier_run:  # one after another, well before the call
        t, earlier = trace.start - 1000.0, []
        for r in rows:
            earlier.append({**r, "start": t, "end": t + 1.1 * (r["end"] - r["start"])})
            t = earlier[-1]["end"]
        rows = earlier + rows
    pair = SimpleNamespace(recorder=Rows(rows), service_model=service)
    return compare.call_figures(pair, {"ayo": ((trace.start, trace.end), [trace])}), trace.latency


def test_call_figures_give_the_bound_from_the_pairs_service_model(capsys: pytest.CaptureFixture[str]) -> None:
    figures, latency = chain_call(StepServiceModel(STEP))
    lb = figures["lower_bound"]
    assert lb["bound_s"] == pytest.approx(latency) and lb["service_model"] == "StepServiceModel"
    assert "ayo_utilization" in figures and "model_bound" not in figures
    rows = [{**figures, "ayo_s": latency * 1.2}, {**figures, "ayo_s": latency * 1.6}]
    s = compare.summarize_bounds(rows)
    assert s["latency_over_bound_median"] == pytest.approx(1.4) and s["latency_over_bound_min"] == pytest.approx(1.2)
    assert s["lower_bound_llm_requests_with_tokens"] == s["lower_bound_llm_requests"] == 4
    compare.print_bounds(s)
    printed = capsys.readouterr().out
    assert "lower bound (any schedule)" in printed and "latency / bound 1.40x (min 1.20x)" in printed
    assert "not a bound" in printed  # the utilization line says what it is


def test_without_a_profile_the_rest_of_the_runs_requests_are_the_service_model() -> None:
    # the same two chained requests ran earlier (stock's run), each alone: their shapes price the call,
    # each capped by what the call's own request took
    figures, latency = chain_call(None, earlier_run=True)
    lb = figures["lower_bound"]
    assert lb["service_model"].startswith("measured")
    assert 0 < lb["bound_s"] <= latency * (1 + 1e-9)
    assert lb["bound_s"] == pytest.approx(latency, rel=0.05)  # a chain: its requests' own times, end to end
    # the call alone in the run: it never prices itself (no lone shape outside it), so no bound but 0
    alone, _ = chain_call(None)
    assert alone["lower_bound"]["bound_s"] == 0.0


def summary_row(summary: dict[str, Any]) -> str:
    base = {"n": 2, "stock_median_s": 2.0, "stock_p95_s": 2.1, "ayo_median_s": 1.0, "ayo_p95_s": 1.1,
            "median_ratio": 2.0, "balanced_ratio": 2.0, "identical_answers": 2}
    return readme_table._latency_row("app", {"summary": {**base, **summary}, "pairs": []})


def test_readme_table_renders_the_bound_and_says_when_a_file_has_none() -> None:
    new = summary_row({"latency_over_bound_median": 1.234, "latency_over_bound_min": 1.01,
                       "utilization_engine": "llm", "gap_median_s": {}, "ayo_overhead_median_pct": 0.5})
    assert "| 1.23x (min 1.01x) |" in new
    old = summary_row({"busiest_engine": "llm", "efficiency_median": 0.99, "efficiency_model_median": 1.13,
                       "gap_median_s": {"outside_graph": 0.02}})
    assert "| not measured |" in old and "1.13" not in old and "0.02 s" in old
    assert "lower bound (any schedule)" in readme_table.render(readme_table.RESULTS_DIR)
