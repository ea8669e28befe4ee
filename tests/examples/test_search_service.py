"""The search service: real HTTP on loopback, BM25 ranking, declared latency."""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import pytest

from ayo_examples.search_service import DEFAULT_LATENCY_S, SearchService, declared_latency, fts_query


@pytest.fixture(scope="module")
def fast_service():  # type: ignore[no-untyped-def]
    with SearchService(latency_s=0.0) as svc:
        yield svc


def search(svc: SearchService, q: str, k: int = 3) -> dict:
    response = httpx.get(f"{svc.url}/search", params={"q": q, "k": k}, timeout=10)
    response.raise_for_status()
    return response.json()


def test_health_and_json_shape(fast_service: SearchService) -> None:
    health = httpx.get(f"{fast_service.url}/health", timeout=10).json()
    assert health["ok"] and health["documents"] > 300
    body = search(fast_service, "serialize object to JSON", k=2)
    assert body["query"] == "serialize object to JSON" and body["k"] == 2
    assert len(body["results"]) == 2
    assert set(body["results"][0]) == {"id", "title", "text", "score"}


@pytest.mark.parametrize(("query", "expected"), [
    ("json dumps serialize obj to a JSON formatted str", "json.dumps"),
    ("shutil move recursively a file or directory", "shutil.move"),
    ("textwrap dedent remove common leading whitespace", "textwrap.dedent"),
    ("statistics median middle value of numeric data", "statistics.median"),
])
def test_bm25_ranks_the_obvious_document_first(fast_service: SearchService, query: str, expected: str) -> None:
    results = search(fast_service, query)["results"]
    assert results[0]["id"] == expected
    scores = [r["score"] for r in results]
    assert scores == sorted(scores)  # bm25: lower is better, best first


def test_fts_syntax_in_queries_is_harmless(fast_service: SearchService) -> None:
    assert fts_query('NOT "json" OR (dumps*') == '"not" OR "json" OR "or" OR "dumps"'
    assert search(fast_service, 'NOT "json" OR (dumps*')["results"]
    assert search(fast_service, "zzzzqqq")["results"] == []


def test_bad_requests_get_clear_errors(fast_service: SearchService) -> None:
    assert httpx.get(f"{fast_service.url}/search", params={"q": " "}, timeout=10).status_code == 400
    assert httpx.get(f"{fast_service.url}/search", params={"q": "x", "k": "many"}, timeout=10).status_code == 400
    assert httpx.get(f"{fast_service.url}/nope", timeout=10).status_code == 404


def test_latency_is_declared_and_honoured_concurrently() -> None:
    assert declared_latency() == DEFAULT_LATENCY_S == 0.3
    with SearchService(latency_s=0.25) as svc:
        start = time.perf_counter()
        search(svc, "json")
        assert time.perf_counter() - start >= 0.25
        # Requests are served concurrently, as by a real API: 4 at once take ~one latency.
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda q: search(svc, q), ["json", "csv", "shutil", "re"]))
        assert 0.25 <= time.perf_counter() - start < 0.9


def test_latency_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AYO_SEARCH_LATENCY_S", "0.05")
    assert SearchService().latency_s == 0.05
    with pytest.raises(ValueError, match=">= 0"):
        SearchService(latency_s=-1)


def test_subprocess_mode_starts_and_stops() -> None:
    svc = SearchService(latency_s=0.0, mode="process")
    with svc:
        assert search(svc, "json loads")["results"][0]["id"].startswith("json.")
        proc = svc._proc
    assert proc is not None and proc.poll() is not None  # stopped with the block
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{svc.url}/health", timeout=2)


def test_the_service_logs_its_searches_on_the_machines_monotonic_clock() -> None:
    """``GET /requests`` (what a benchmark's lower bound reads): each search's arrival and reply on
    ``time.monotonic()``, which a subprocess shares with its parent, and the declared latency."""
    with SearchService(latency_s=0.05, mode="process") as svc:
        before = time.monotonic()
        search(svc, "json loads")
        after = time.monotonic()
        httpx.get(f"{svc.url}/health", timeout=10)  # not a search: not logged
        logged = svc.requests_between(before, after)
        assert len(logged) == 1 and logged[0]["latency_s"] == 0.05
        assert before <= logged[0]["start"] and logged[0]["end"] - logged[0]["start"] >= 0.05
        assert svc.requests_between(after, time.monotonic()) == []
