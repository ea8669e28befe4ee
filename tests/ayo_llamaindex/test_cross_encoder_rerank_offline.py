"""``SentenceTransformerRerank`` with ``Options(batch_cross_encoder=True)``: the predicts of concurrent queries
are served by one forward pass of the user's own CrossEncoder; nodes, order, scores, metadata and events as
stock. By default (no option) the reranker runs alone per query, bit-identical.

The model is real: the all-MiniLM-L6-v2 folder loaded as a CrossEncoder (no cross-encoder weights offline:
a fresh scoring head, seeded), on the CPU. The retriever is a real index with HuggingFace embeddings; the
answer LLM is the tests' fake LLM. Forward passes are counted with a torch forward hook on the model; a
pre-hook holds the first pass until the other queries have queued, so the batching is not left to timing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.postprocessor import SentenceTransformerRerank

import ayo_llamaindex
from ayo_core.models import embedding_model_path
from ayo_core.pipeline import Options
from ayo_llamaindex import cross_encoder
from tests.ayo_llamaindex.conftest import TEXTS, FakeLLM

QUERIES = ["How do I turn Python objects into JSON?", "How can a list stay sorted?",
           "Which module implements a priority queue?", "How do I read a spreadsheet file?"]
BATCHED = Options(batch_cross_encoder=True)


@pytest.fixture(scope="module")
def reranker() -> SentenceTransformerRerank:
    torch.manual_seed(0)  # the scoring head is fresh: seeded, so scores are spread and fixed
    return SentenceTransformerRerank(model=str(embedding_model_path()), top_n=2, device="cpu")


class Passes:
    """Counts the model's forward passes (``sizes``: pairs per pass); ``hold(n)`` keeps the first pass waiting
    until ``n`` more queries have queued at the batcher (or 10 s), so the test sees them arrive during a pass;
    ``started`` is set when the first pass begins."""

    def __init__(self, rr: SentenceTransformerRerank) -> None:
        self.model, self.sizes, self.waiting_for = rr._model, [], 0  # noqa: SLF001 - the test's own reranker
        self.started = threading.Event()
        self.handles = [self.model.register_forward_pre_hook(self.pre), self.model.register_forward_hook(self.post)]

    def hold(self, n: int) -> None:
        self.waiting_for = n

    def pre(self, module: Any, args: tuple) -> None:
        if self.started.is_set():
            return
        self.started.set()
        batcher, deadline = cross_encoder.batcher_for(self.model), time.monotonic() + 10
        while batcher.statistics().waiting < self.waiting_for and time.monotonic() < deadline:
            time.sleep(0.01)

    def post(self, module: Any, args: tuple, output: Any) -> None:
        self.sizes.append(len(output["scores"]))

    def __enter__(self) -> Passes:
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self.handles:
            handle.remove()


def engine(index: Any, rr: SentenceTransformerRerank) -> Any:
    return index.as_query_engine(llm=FakeLLM(), similarity_top_k=4, node_postprocessors=[rr])


def ranked(response: Any) -> list[tuple[str, Any, str]]:
    """(id and text, score, score type) per source node: a fresh index per side has fresh ids, the same texts."""
    return [(n.node.get_content(), n.score, type(n.score).__name__) for n in response.source_nodes]


def same(stock: list[Any], fast: list[Any], exact: bool, text: bool = True) -> None:
    for a, b in zip(stock, fast, strict=True):
        assert str(a) == str(b) or not text
        assert [n for n, _, _ in ranked(a)] == [n for n, _, _ in ranked(b)]  # same nodes, same order
        assert [t for _, _, t in ranked(a)] == [t for _, _, t in ranked(b)]  # numpy float32, as stock assigns
        for (_, sa, _), (_, sb, _) in zip(ranked(a), ranked(b), strict=True):
            # a merged pass pads to the batch's longest pair: a score may move in its last bit (ayo_core.engines.batcher)
            assert sb == sa if exact else sb == pytest.approx(sa, abs=1e-6)


def gather(qe: Any) -> list[Any]:
    async def run() -> list[Any]:
        return list(await asyncio.gather(*(qe.aquery(q) for q in QUERIES)))

    return asyncio.run(run())


def test_concurrent_aqueries_share_a_forward_pass(index, reranker) -> None:
    stock, fast = engine(index, reranker), ayo_llamaindex.optimize(engine(index, reranker), options=BATCHED)
    want = gather(stock)
    with Passes(reranker) as passes:
        passes.hold(len(QUERIES) - 1)
        got = gather(fast)
    same(want, got, exact=False)
    assert len(passes.sizes) < len(QUERIES) and sum(passes.sizes) == 4 * len(QUERIES)
    assert passes.sizes == [4, 4 * (len(QUERIES) - 1)]  # the first alone, the rest in one pass


def test_concurrent_threads_share_a_forward_pass(index, reranker) -> None:
    stock, fast = engine(index, reranker), ayo_llamaindex.optimize(engine(index, reranker), options=BATCHED)
    want = [stock.query(q) for q in QUERIES]
    with Passes(reranker) as passes, ThreadPoolExecutor(len(QUERIES)) as pool:
        passes.hold(len(QUERIES) - 1)
        got = list(pool.map(fast.query, QUERIES))
    same(want, got, exact=False)
    assert len(passes.sizes) < len(QUERIES) and sum(passes.sizes) == 4 * len(QUERIES)


def test_a_lone_query_goes_straight_through_bit_identical(index, reranker) -> None:
    stock, fast = engine(index, reranker), ayo_llamaindex.optimize(engine(index, reranker), options=BATCHED)
    want = stock.query(QUERIES[0])
    with Passes(reranker) as passes:
        start = time.monotonic()
        got = fast.query(QUERIES[0])
        assert time.monotonic() - start < 5
    same([want], [got], exact=True)  # alone, the pass is stock's own call
    assert passes.sizes == [4]


def test_by_default_each_query_runs_alone_bit_identical(index, reranker) -> None:
    stock, fast = engine(index, reranker), ayo_llamaindex.optimize(engine(index, reranker))
    with Passes(reranker) as passes:
        got = gather(fast)
    same(gather(stock), got, exact=True)
    assert passes.sizes == [4] * len(QUERIES)
    assert "cross_encoder_batching" not in str(fast.explain())


def test_explain_names_the_batching(index, reranker) -> None:
    text = str(ayo_llamaindex.optimize(engine(index, reranker), options=BATCHED).explain())
    assert "post0 = rerank" in text and "cross_encoder_batching at post0" in text
    assert "LocalRerank[SentenceTransformerRerank] CrossEncoder.predict batched across concurrent queries" in text


def test_events_and_retrieval_scores_as_stock(embed_model, reranker) -> None:
    """keep_retrieval_score writes into the stored nodes' metadata (which the next query's pairs and prompts
    include): each side gets its own fresh index. The prompt then carries the retrieval score, so the
    answers are the same only if the query vectors are stock's bit for bit under concurrent queries."""
    rr = reranker.model_copy()
    rr.keep_retrieval_score = True

    def run(optimized: bool) -> tuple[list[Any], list[tuple[str, int]]]:
        debug = LlamaDebugHandler(print_trace_on_end=False)
        fresh = VectorStoreIndex.from_documents([Document(text=t, id_=f"doc{i}") for i, t in enumerate(TEXTS)],
                                                embed_model=embed_model)
        qe = engine(fresh, rr)
        for part in (qe, qe.retriever, qe._response_synthesizer, rr):  # noqa: SLF001 - the test's own engine
            part.callback_manager = CallbackManager([debug])
        answers = gather(ayo_llamaindex.optimize(qe, options=BATCHED) if optimized else qe)
        pairs = sorted((p[0].payload["query_str"], len(p[1].payload["nodes"]))
                       for p in debug.get_event_pairs(CBEventType.RERANKING))
        return answers, pairs

    (want, stock_events), (got, fast_events) = run(False), run(True)
    same(want, got, exact=False)
    assert fast_events == stock_events and len(stock_events) == len(QUERIES)
    for a, b in zip(want, got, strict=True):
        assert [n.node.metadata["retrieval_score"] for n in a.source_nodes] == [
            n.node.metadata["retrieval_score"] for n in b.source_nodes]


def test_a_model_error_is_stocks_and_spares_the_other_queries(index, reranker) -> None:
    """The poisoned query's pass fails (a forward hook raising on its words); merged with others, each query runs
    again alone, so only that query fails, with the error stock's own call raises."""
    poison = set(reranker._model.tokenizer("zebra xylophone")["input_ids"][1:-1])  # noqa: SLF001

    def explode(module: Any, args: tuple, kwargs: dict) -> None:
        features = kwargs if "input_ids" in kwargs else args[0]
        if poison & set(features["input_ids"].flatten().tolist()):
            raise RuntimeError("cross-encoder exploded on zebra xylophone")

    stock, fast = engine(index, reranker), ayo_llamaindex.optimize(engine(index, reranker), options=BATCHED)
    want = [stock.query(QUERIES[0]), stock.query(QUERIES[1])]
    before = cross_encoder.batcher_for(reranker._model).statistics()  # noqa: SLF001
    with Passes(reranker) as passes, ThreadPoolExecutor(3) as pool:
        handle = reranker._model.register_forward_pre_hook(explode, with_kwargs=True)  # noqa: SLF001 - after Passes'
        try:
            with pytest.raises(RuntimeError) as stock_error:
                stock.query("zebra xylophone")
            passes.started.clear()
            passes.hold(2)
            first = pool.submit(fast.query, QUERIES[0])
            assert passes.started.wait(10)
            poisoned, other = pool.submit(fast.query, "zebra xylophone"), pool.submit(fast.query, QUERIES[1])
            with pytest.raises(RuntimeError) as fast_error:
                poisoned.result()
            same(want, [first.result(), other.result()], exact=False)
        finally:
            handle.remove()
    assert type(fast_error.value) is type(stock_error.value) and str(fast_error.value) == str(stock_error.value)
    # the first query's pass; the merged pass of the two others (failed: no scores); each of them alone
    after = cross_encoder.batcher_for(reranker._model).statistics()  # noqa: SLF001
    assert passes.sizes == [4, 4] and (after.passes - before.passes, after.requests - before.requests) == (4, 3)


def test_a_subclass_overriding_its_postprocess_runs_alone_as_before(index) -> None:
    class Mine(SentenceTransformerRerank):
        def _postprocess_nodes(self, nodes: Any, query_bundle: Any = None) -> Any:
            return super()._postprocess_nodes(nodes, query_bundle)[:1]

    torch.manual_seed(0)
    rr = Mine(model=str(embedding_model_path()), top_n=2, device="cpu")
    stock, fast = engine(index, rr), ayo_llamaindex.optimize(engine(index, rr), options=BATCHED)
    assert not fast.plan.postprocessors[0].batched
    with Passes(rr) as passes:
        got = gather(fast)
    same(gather(stock), got, exact=True)
    assert passes.sizes == [4] * len(QUERIES)
    text = str(fast.explain())
    assert "Mine overrides _postprocess_nodes" in text and "cross_encoder_batching" not in text


def test_concurrent_queries_never_wait_for_a_window(index, reranker) -> None:
    """Thread safety under repetition: many rounds of concurrent queries, every answer as stock's."""
    stock, fast = engine(index, reranker), ayo_llamaindex.optimize(engine(index, reranker), options=BATCHED)
    want = {q: stock.query(q) for q in QUERIES}
    barrier = threading.Barrier(len(QUERIES))

    def ask(q: str) -> Any:
        barrier.wait()
        return fast.query(q)

    for _ in range(3):
        with ThreadPoolExecutor(len(QUERIES)) as pool:
            got = list(pool.map(ask, QUERIES))
        same([want[q] for q in QUERIES], got, exact=False)


@pytest.mark.parametrize("mode", ["context", "condense_question"])
def test_a_chat_engine_takes_the_option_too(index, reranker, mode) -> None:
    """The chat engines capture their postprocessors (or their query engine's) with the option, as the
    query engine does: explain() names the batching, and a turn answers as stock's."""
    def chat_engine() -> Any:
        if mode == "context":
            return index.as_chat_engine(chat_mode=mode, llm=FakeLLM(), similarity_top_k=4,
                                        node_postprocessors=[reranker])
        from llama_index.core.chat_engine import CondenseQuestionChatEngine

        return CondenseQuestionChatEngine.from_defaults(query_engine=engine(index, reranker), llm=FakeLLM())

    fast = ayo_llamaindex.optimize(chat_engine(), options=BATCHED)
    assert str(fast.chat(QUERIES[0])) == str(chat_engine().chat(QUERIES[0]))
    assert cross_encoder.NOTE in str(fast.explain())
