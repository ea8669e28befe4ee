"""``benchmarks/overhead.py`` runs end to end on its fake engines (a smoke run; the figures are printed,
never asserted: timing belongs to benchmarks, not tests)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import overhead


def test_overhead_benchmark_runs_and_both_sides_answer(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "overhead.json"
    assert overhead.main(["-n", "3", "--only", "langchain_chain", "--only", "llamaindex_query_engine",
                          "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "FAKE ENGINES" in printed and "added median" in printed
    data = json.loads(out.read_text())
    assert data["fake_engines"] and data["provenance"]["server"] is None and data["provenance"]["git"]["commit"]
    assert set(data["results"]) == {f"{p} {m}" for p in ("langchain_chain", "llamaindex_query_engine")
                                    for m in ("async", "sync")}
    assert all(r["answers_as_expected"] and r["n"] == 3 for r in data["results"].values())


def test_the_stub_counts_what_it_is_asked() -> None:
    import httpx

    stub = overhead.InstantOpenAI()
    try:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(f"{stub.url}/chat/completions", json=body, timeout=10).json()
        assert answer["choices"][0]["message"]["content"] == overhead.ANSWER
        assert "device_config=cpu" in httpx.get(stub.url.removesuffix("/v1") + "/server_info", timeout=10).text
        assert stub.requests == {"POST /v1/chat/completions": 1, "GET /server_info": 1}
    finally:
        stub.close()
