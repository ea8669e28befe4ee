"""``benchmarks/simulate_cluster.py``, short form: a small cluster on the virtual clock runs end to end.

The full run (16 + 4 replicas, 10,000 queries) is a benchmark; this checks that the short form
writes its figures and plot, that every system gives the same answers for the same jobs, and the
one routing property the figures rest on (prefix affinity finds more of the prompts cached than
round robin). Latency figures are printed, not asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import simulate_cluster


@pytest.mark.parametrize("replica_model", ["serving", "slots"])
def test_short_run_writes_figures_and_every_system_answers_the_same(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                                  replica_model: str) -> None:
    argv = ["--queries", "60", "--llm-replicas", "2", "--embed-replicas", "1", "--cost-replicas", "1,2",
            "--cost-queries", "20", "--replica-model", replica_model, "--out", str(tmp_path)]
    assert simulate_cluster.main(argv) == 0
    stem = "simulate_cluster" if replica_model == "serving" else "simulate_cluster-slots"
    data = json.loads((tmp_path / f"{stem}.json").read_text())
    assert (tmp_path / f"{stem}.png").stat().st_size > 0
    assert data["provenance"]["replica_model"] == replica_model and data["provenance"]["git"]["commit"]
    assert data["summary"]["answers_identical"] is True
    systems = {r["system"] for r in data["rows"]}
    assert systems == {*simulate_cluster.SYSTEMS, simulate_cluster.ABLATION}
    assert all(r["queries"] == 60 and r["resent"] == 0 for r in data["rows"])
    assert set(data["scheduling_cost"]) == {"1", "2"}
    assert all(c["gc_ms_per_query"] >= 0 and c["scheduling_ms_per_query"] > 0 for c in data["scheduling_cost"].values())
    printed = capsys.readouterr().out
    assert "stock saturation throughput" in printed and "answers identical across every system and load: True" in printed


def test_prefix_affinity_finds_more_prompts_cached_than_round_robin() -> None:
    from ayo_core.runtime.clock import run_virtual

    jobs = simulate_cluster.make_jobs(200, seed=0)
    rates = {}
    for system in ("ayo_rr", "ayo_affinity_program"):
        res = run_virtual(lambda s=system: simulate_cluster.run_system(s, jobs, 20.0, 4, 1, seed=0))
        rates[system] = res["llm_hit_rate"]
    assert rates["ayo_affinity_program"] > rates["ayo_rr"], rates
