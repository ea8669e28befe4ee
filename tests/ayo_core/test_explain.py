"""The explain() result type, optimization records, prefix warming's rule and error mapping, offline."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from ayo_core.engines import capabilities, prefix_warming
from ayo_core.explain import Explanation, OpaqueModule, explanation, record_optimization
from ayo_core.graph import Graph, Node, Op, PrefixSpec
from ayo_core.passes import optimize_graph
from ayo_core.passes.prefill import progressive_prefill
from ayo_core.runtime.errors import NodeFailed, unwrap_node_failure


async def _noop(ctx: Any, **kw: Any) -> None:
    return None


def prefill_graph() -> Graph:
    """question ==> synth <== chunks(retrieval); chunks is streamed in parts (a progressive warm-up reads them)."""
    g = Graph()
    g.input("question")
    g.add(Node("chunks", Op.SEARCH, fn=_noop, inputs={"q": "question"}, streamable=True, cost=1.0))
    g.add(Node("synth", Op.DECODE, fn=_noop, inputs={"question": "question", "chunks": "chunks"}, engine="llm",
               cost=1.0, meta={"prefix": PrefixSpec(early_inputs=("question",), build=_noop)}))
    g.add(Node("warm", **progressive_prefill(_noop, "chunks", {"question": "question"}, warms="synth")))
    g.output("synth")
    return g


def test_record_optimization_is_idempotent_and_never_leaks_into_copies() -> None:
    g = Graph()
    record_optimization(g, "x", "n1", "first")
    copy = g.for_query("q2")
    record_optimization(copy, "y", "n2")
    record_optimization(copy, "y", "n2")
    assert [o["name"] for o in g.meta["optimizations"]] == ["x"]
    assert [(o["name"], o["node"]) for o in copy.meta["optimizations"]] == [("x", "n1"), ("y", "n2")]


def test_passes_record_prefill_splitting_and_progressive_prefill() -> None:
    g = optimize_graph(prefill_graph())
    g.lint()
    assert g["synth.prefill"].op is Op.PARTIAL_PREFILL
    assert g["warm"].meta.get("pipelined") is True  # decode pipelining runs it per part of chunks
    records = {(o["name"], o["node"]) for o in g.meta["optimizations"]}
    assert records == {("prefill_splitting", "synth.prefill"), ("progressive_prefill", "warm")}
    again = optimize_graph(g)  # idempotent: nothing recorded twice
    assert len(again.meta["optimizations"]) == 2


def test_explanation_structure_and_text_view() -> None:
    g = optimize_graph(prefill_graph())
    ex = explanation("Ayo plan for demo", graph=g, modules=[("retriever", "Retrieval")],
                     opaque=[("MyLLM", "not an OpenAI-compatible class")])
    assert isinstance(ex, Explanation)
    assert ex.opaque == [OpaqueModule("MyLLM", "not an OpenAI-compatible class")]
    assert [p.name for p in ex.passes] == ["dependency_pruning", "stage_decomposition", "prefill_splitting",
                                           "decode_pipelining", "early_stop"]
    assert ex.pass_changed("prefill_splitting") is True and ex.pass_changed("nope") is None
    assert {o.name for o in ex.optimizations} == {"prefill_splitting", "progressive_prefill"}
    assert ex.fired("prefill_splitting")[0].node == "synth.prefill"
    assert ex.fired("progressive_prefill")[0].engine_calls is None  # no query ran yet
    assert ex.node("synth.prefill").op == "partial_prefill" and "decode" in ex.ops
    assert ("question", "synth.prefill") in ex.edges and ("chunks", "synth") in ex.edges
    assert ex.trace is None
    text = str(ex)
    assert "== module graph ==" in text and "opaque (1)" in text and "MyLLM" in ex
    assert "prefill_splitting at synth.prefill" in text and ex.count("progressive_prefill") >= 1


def test_unwrap_node_failure_returns_the_innermost_cause_with_a_note() -> None:
    cause = ValueError("bad prompt variable")
    nested = NodeFailed("q1", "outer", "mod", "decode", NodeFailed("q1", "inner", "prompt", "transform", cause))
    out = unwrap_node_failure(nested)
    assert out is cause
    assert any("'inner'" in n and "'prompt'" in n for n in out.__notes__)
    other = RuntimeError("not a node failure")
    assert unwrap_node_failure(other) is other and not hasattr(other, "__notes__")


class _FakeLLM:
    """Tokenizes one token per character; records prefill requests."""

    def __init__(self) -> None:
        self.prefills: list[list[int]] = []

    async def tokenize(self, prompt: str) -> list[int]:
        return [ord(c) for c in prompt]

    async def prefill(self, prompt: list[int], **kw: Any) -> None:
        self.prefills.append(list(prompt))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> str:
    url = "http://127.0.0.1:1/v1"
    monkeypatch.delenv("AYO_LLM_DEVICE", raising=False)
    monkeypatch.setitem(capabilities._cache_info, "http://127.0.0.1:1", (True, 8))
    return url


def test_warm_budget_follows_device_cache_and_block_size(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AYO_LLM_DEVICE", "cuda")
    budget = asyncio.run(prefix_warming.warm_budget(server, min_tokens=4))
    assert budget == prefix_warming.WarmBudget(least=8, block_size=8)
    monkeypatch.setenv("AYO_LLM_DEVICE", "cpu")  # the device rule
    assert asyncio.run(prefix_warming.warm_budget(server, min_tokens=4)) is None
    monkeypatch.setenv("AYO_LLM_DEVICE", "cuda")
    monkeypatch.setitem(capabilities._cache_info, "http://127.0.0.1:1", (False, 8))  # prefix cache off
    assert asyncio.run(prefix_warming.warm_budget(server)) is None


def test_warm_prefix_sends_whole_blocks_of_the_shared_token_prefix(server: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AYO_LLM_DEVICE", "cuda")
    llm = _FakeLLM()
    head = "System: be brief. Question: what is JSON? Context: "
    renders = [{"prompt": head + s + " Answer:"} for s in prefix_warming.STAND_INS]
    sent = asyncio.run(prefix_warming.warm_prefix(llm, server, renders, min_tokens=4))
    (ids,) = llm.prefills
    assert sent == len(ids) and len(ids) % 8 == 0
    assert head.startswith("".join(map(chr, ids))) and len(head) - len(ids) < 8 + prefix_warming.SAFETY_TOKENS
    assert prefix_warming.block_aligned([1, 2, 3], None) == [1, 2, 3]
    assert asyncio.run(prefix_warming.warm_ids(llm, ids, least=8, block_size=8, already=len(ids))) == 0


def test_engine_busy_reads_the_schedulers_running_requests() -> None:
    class Proxy:
        running_requests = 4

    assert prefix_warming.engine_busy(Proxy(), 4) and not prefix_warming.engine_busy(Proxy(), 5)
    assert not prefix_warming.engine_busy(object(), 1)  # no statistics: idle


def test_openai_errors_rebuild_the_sdks_own_exceptions() -> None:
    import openai

    from ayo_shims import openai_errors

    class EngineError(RuntimeError):
        status_code: int | None = None
        body: str | None = None

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:1/v1", api_key="none")
    url = "http://127.0.0.1:1/v1/chat/completions"
    bad = EngineError("rejected")
    bad.status_code, bad.body = 400, '{"error": {"message": "prompt too long"}}'
    err = openai_errors.sdk_error(client, url, bad)
    assert isinstance(err, openai.BadRequestError) and "prompt too long" in str(err)
    assert any("rejected" in n for n in err.__notes__)
    gone = EngineError("no server")
    gone.__cause__ = httpx.ConnectError("refused")
    assert isinstance(openai_errors.sdk_error(client, url, gone), openai.APIConnectionError)
    assert openai_errors.sdk_error(client, url, gone, transport=False) is None
    slow = EngineError("slow")
    slow.__cause__ = httpx.ReadTimeout("slow")
    assert isinstance(openai_errors.sdk_error(client, url, slow), openai.APITimeoutError)
    assert openai_errors.sdk_error(client, url, EngineError("malformed stream")) is None
    assert openai_errors.sdk_error(object(), url, bad) is None  # not an SDK client: the caller keeps its error
