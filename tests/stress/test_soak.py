"""Soak, short form (the long form is ``python -m benchmarks.soak -n 1000``): ~50 queries through both
adapters' example apps from synchronous threads and event loops at once, on the real server.

Checks: every answer equals stock's, nothing failed, answered twice or lost; resident memory flat after
the warm-up (< 5 %); no threads, file descriptors or tasks on Ayo's loop left behind; nothing in flight
in Ayo's engine schedulers or on the server at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import soak  # noqa: E402 - needs the checkout on sys.path

pytestmark = [pytest.mark.llm, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def soak_result(llm_url: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from ayo_examples.common import EnginesConfig, load_questions
    from ayo_examples.search_service import SearchService

    with SearchService(mode="process") as search:
        cfg = EnginesConfig(llm_url=llm_url, max_tokens=8, search_url=search.url,
                            chroma_dir=str(tmp_path_factory.mktemp("soak-chroma")))
        apps = soak.build_apps(["naive_rag", "search_augmented"], cfg)
        questions = {a.name: load_questions(a.name, 3) for a in apps}
        result = soak.soak(apps, questions, n=50, warmup=12, threads=3, loops=2, per_loop=2, llm_url=llm_url)
    soak.print_figures(result)
    return result


def test_every_answer_equals_stock_once(soak_result: dict[str, Any]) -> None:
    r = soak_result
    assert r["warmup"]["mismatches"] == r["warmup"]["failures"] == 0, r
    assert r["failures"] == 0, r["failure_examples"]
    assert r["mismatches"] == 0, r["mismatch_examples"]
    assert r["answered"] == r["jobs"] == 50
    assert r["answered_twice"] == r["never_answered"] == 0


def test_memory_flat_after_warmup(soak_result: dict[str, Any]) -> None:
    assert soak_result["rss_growth_pct"] < 5.0, soak_result["rss_mib"]


def test_nothing_leaked(soak_result: dict[str, Any]) -> None:
    r = soak_result
    # Ayo's loop keeps a fixed set of helper tasks and pooled connections; they must not grow with queries.
    assert r["threads"][1] <= r["threads"][0], r["new_threads"]
    assert r["fds"][1] <= r["fds"][0] + 8, r["fds"]
    assert r["ayo_loop_tasks"][1] <= r["ayo_loop_tasks"][0], r["ayo_loop_tasks"]
    assert r["ayo_in_flight"] == {"waiting": 0, "running": 0, "unaccounted": 0}
    # The server is shared with other test sessions: the least it reported over a few seconds.
    assert r["server_in_flight_min"] == 0
