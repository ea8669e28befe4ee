"""``ayo_bench.bound`` (Ayo's busiest-engine utilization and its gap) on synthetic traces with known intervals."""

from __future__ import annotations

import pytest

from ayo_bench import bound
from ayo_bench.bound import QueryWork


def test_interval_algebra() -> None:
    assert bound.merge([(3, 4), (0, 1), (0.5, 2), (2, 2.5), (5, 5)]) == [(0, 2.5), (3, 4)]
    assert bound.length([(0, 1), (0.5, 2), (3, 4)]) == pytest.approx(3.0)  # the overlap counts once
    assert bound.clip([(0, 2), (3, 6)], 1, 4) == [(1, 2), (3, 4)]
    assert bound.subtract([(0, 10)], [(1, 2), (1.5, 3), (8, 12)]) == [(0, 1), (3, 8)]
    assert bound.clip_to([(0, 5)], [(1, 2), (4, 9)]) == [(1, 2), (4, 5)]


def test_busiest_engine_bound_with_overlaps_and_gaps() -> None:
    # a 10 s call; the graph runs 1..9.5; the LLM serves 3 requests, two overlapping (batched)
    work = QueryWork(call=(0.0, 10.0), graph=[(1.0, 9.5)],
                     engines={"llm": [(2.0, 5.0), (4.0, 6.0), (7.0, 9.0)],   # union 6 s
                              "embed": [(1.0, 2.5)],                        # overlaps the LLM 0.5 s
                              "search": [(6.0, 6.5)]},
                     queued=[(6.5, 6.8)])
    r = bound.busiest_engine_bound(work)
    assert r.busiest_engine == "llm" and r.busy_s == pytest.approx(6.0)
    assert r.efficiency == pytest.approx(0.6)  # below 1, and the report says where the 4 s went
    assert r.gap_s == pytest.approx(4.0)
    assert r.outside_graph_s == pytest.approx(1.5)   # 0..1 and 9.5..10
    assert r.other_engine_s == pytest.approx(1.5)    # embed 1..2, search 6..6.5
    assert r.queued_s == pytest.approx(0.3)          # 6.5..6.8
    assert r.runtime_s == pytest.approx(0.7)         # 6.8..7 and 9..9.5: nothing of the query running
    parts = r.outside_graph_s + r.other_engine_s + r.queued_s + r.runtime_s
    assert parts == pytest.approx(r.gap_s)
    assert r.busy_by_engine == pytest.approx({"llm": 6.0, "embed": 1.5, "search": 0.5})


def test_an_engine_busy_all_call_long_scores_one_and_work_outside_the_call_is_ignored() -> None:
    work = QueryWork(call=(0.0, 4.0), graph=[(0.0, 4.0)], engines={"llm": [(-1.0, 2.0), (2.0, 5.0)]})
    r = bound.busiest_engine_bound(work)
    assert r.busy_s == pytest.approx(4.0) and r.efficiency == pytest.approx(1.0) and r.gap_s == 0.0


def test_no_engine_work_at_all() -> None:
    r = bound.busiest_engine_bound(QueryWork(call=(0.0, 1.0)))
    assert r.busy_s == 0.0 and r.efficiency == 0.0 and r.outside_graph_s == pytest.approx(1.0)


def test_recorded_llm_requests_merge_with_the_traces_llm_calls() -> None:
    class Span:
        def __init__(self, engine: str, start: float, end: float, queued: float = 0.0) -> None:
            self.engine, self.start, self.end, self.queued = engine, start, end, queued

    class Trace:
        start, end = 1.0, 5.0
        engine_calls = [Span("llm", 2.0, 3.0), Span("embed", 1.0, 2.0)]
        nodes = [Span("llm", 1.5, 3.0, queued=0.5), Span("local", 3.0, 3.2)]

    # a request made outside Ayo's graph (0.2..0.8) is seen only by the recorder
    work = bound.work_from_trace(Trace(), (0.0, 6.0), [{"start": 0.2, "end": 0.8}, {"start": 2.0, "end": 3.0}])
    assert set(work.engines) == {"embed", "llm server (recorded)"}
    assert bound.length(work.engines["llm server (recorded)"]) == pytest.approx(1.6)
    assert work.queued == [(1.5, 2.0)] and work.other_work == [(3.0, 3.2)] and work.graph == [(1.0, 5.0)]


def test_the_functions_own_code_is_split_out_of_the_time_outside_the_graph() -> None:
    # a doc-QA call 0..10: the user's code 0..1 and 9..9.6 (its collection, its splitting), Ayo's
    # graph 1.5..9; 1..1.5 and 9.6..10 are Ayo's hooks outside the graph
    work = QueryWork(call=(0.0, 10.0), graph=[(1.5, 9.0)], engines={"llm": [(2.0, 9.0)]},
                     caller_code=[(0.0, 1.0), (9.0, 9.6)])
    r = bound.busiest_engine_bound(work)
    assert r.outside_graph_s == pytest.approx(2.5)
    assert r.caller_code_s == pytest.approx(1.6)   # what stock runs too: not Ayo's overhead
    assert r.outside_graph_s - r.caller_code_s == pytest.approx(0.9)
