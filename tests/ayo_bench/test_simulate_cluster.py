"""``benchmarks/simulate_cluster.py``, short form: a small cluster on the virtual clock runs end to end.

The full run (16 + 4 replicas, 10,000 queries) is a benchmark; this checks that the short form
writes its figures and plot, that every system gives the same answers for the same jobs, that
the headline is taken against the best stock configuration, that the stream's documents and
repeat rates are what the options say, and the one routing property the figures rest on (prefix
affinity finds more of the prompts cached than round robin). Latency figures are printed, not
asserted. Engines are the simulation's fakes (its subject), step costs from the shipped profile.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ayo_core.runtime.clock import run_virtual
from benchmarks import cluster_workload, simulate_cluster


@pytest.mark.parametrize("replica_model", ["serving", "slots"])
def test_short_run_writes_figures_and_every_system_answers_the_same(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                                  replica_model: str) -> None:
    argv = ["--queries", "60", "--llm-replicas", "2", "--embed-replicas", "1", "--cost-replicas", "1,2",
            "--cost-queries", "20", "--burst-per-replica", "64", "--replica-model", replica_model, "--out", str(tmp_path)]
    assert simulate_cluster.main(argv) == 0
    stem = "simulate_cluster" if replica_model == "serving" else "simulate_cluster-slots"
    data = json.loads((tmp_path / f"{stem}.json").read_text())
    assert (tmp_path / f"{stem}.png").stat().st_size > 0
    prov = data["provenance"]
    assert prov["replica_model"] == replica_model and prov["git"]["commit"]
    assert prov["profile"]["name"] == simulate_cluster.DEFAULT_PROFILE and len(prov["profile"]["sha256"]) == 64
    summary = data["summary"]
    assert summary["answers_identical"] is True
    systems = {r["system"] for r in data["rows"]}
    assert systems == {*simulate_cluster.SYSTEMS, simulate_cluster.ABLATION}
    assert all(r["queries"] == 60 and r["resent"] == 0 for r in data["rows"])
    assert set(data["stock_saturation_qps_by_system"]) == set(simulate_cluster.STOCK_SYSTEMS)
    assert data["stock_saturation_qps"] == max(data["stock_saturation_qps_by_system"].values())
    _check_headline_is_against_the_best_stock(data)
    sched = summary["scheduling_ms_per_query"]
    assert sched["runs"] == sum(r["system"] not in simulate_cluster.STOCK_SYSTEMS for r in data["rows"])
    assert 0 < sched["min"] <= sched["median"] <= sched["max"]
    rates = summary["repeat_rates"]
    assert 0 <= rates["question_repeat_share"] < 1 and 0 <= rates["prefix_hit_possible_share"] < 1
    assert set(data["diagnostic_scheduling_by_replicas_gc_held_off"]) == {"1", "2"}
    printed = capsys.readouterr().out
    assert "stock saturation throughput" in printed and "answers identical across every system and load: True" in printed


def _check_headline_is_against_the_best_stock(data: dict) -> None:
    for load, figures in data["summary"]["per_load"].items():
        stock = {r["system"]: r["p95"] for r in data["rows"]
                 if r["system"] in simulate_cluster.STOCK_SYSTEMS and f"{r['load']:.0%}" == load}
        assert figures["best_stock_p95"] == min(stock.values()), load
        assert figures["p95_ratio_best_stock_over_ayo"] == min(figures["p95_ratio_each_stock_over_ayo"].values())


def test_prefix_affinity_finds_more_prompts_cached_than_round_robin() -> None:
    jobs = cluster_workload.make_jobs(200, seed=0, distinct=50, doc_overlap=1.0)
    rates = {}
    for system in ("stock_rr", "stock_prefix_aware", "ayo_rr", "ayo_affinity_program"):
        res = run_virtual(lambda s=system: simulate_cluster.run_system(s, jobs, 20.0, 4, 1, seed=0))
        rates[system] = res["llm_hit_rate"]
    assert rates["ayo_affinity_program"] > rates["ayo_rr"], rates
    assert rates["stock_prefix_aware"] > rates["stock_rr"], rates


def test_each_query_indexes_its_own_documents_with_the_stated_overlap() -> None:
    same = cluster_workload.make_jobs(300, seed=1, distinct=5, doc_pool=400, doc_overlap=1.0)
    fresh = cluster_workload.make_jobs(300, seed=1, distinct=5, doc_pool=400, doc_overlap=0.0)
    half = cluster_workload.make_jobs(300, seed=1, distinct=5, doc_pool=400, doc_overlap=0.5)
    for jobs in (same, fresh, half):
        assert all(len(set(inp["documents"])) == cluster_workload.DOCS_PER_QUERY for _, inp in jobs)
        assert len({g.nodes["index.ingest"].fn.collection for g, _ in jobs}) == len(jobs)  # one collection each

    def shared_with_first_asking(jobs: list) -> float:
        first: dict[str, set[str]] = {}
        shares = []
        for _, inp in jobs:
            docs = set(inp["documents"])
            if inp["question"] in first:
                shares.append(len(docs & first[inp["question"]]) / len(docs))
            first.setdefault(inp["question"], docs)
        return sum(shares) / len(shares)

    assert shared_with_first_asking(same) == 1.0
    assert shared_with_first_asking(fresh) < 0.1
    assert 0.5 <= shared_with_first_asking(half) < 0.6
    assert cluster_workload.question_repeat_share(same) > 0.9


def test_prefix_hit_possible_counts_leading_blocks_seen_before() -> None:
    block = cluster_workload.PREFIX_BLOCK
    a = " ".join(f"w{i}" for i in range(2 * block))
    b = " ".join(f"w{i}" for i in range(block)) + " " + " ".join(f"x{i}" for i in range(block))
    c = " ".join(f"x{i}" for i in range(2 * block))  # shares no leading block with a or b
    assert cluster_workload.prefix_hit_possible([a, a]) == 0.5
    assert cluster_workload.prefix_hit_possible([a, b]) == 0.25
    assert cluster_workload.prefix_hit_possible([a, c]) == 0.0
