"""QueryFusionRetriever's query-gen decode stops once the lines it keeps are complete; the queries
(and so the answer) are exactly what stock parses from the whole completion."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from ayo_core.engines.llm_client import StopStream
from ayo_llamaindex import retrieval
from tests.ayo_llamaindex.conftest import FakeLLM


class NoRetriever(BaseRetriever):
    """Never called: fusion_retrieve gets its own sub-retrieval functions."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise AssertionError("not used")


def fusion(num_queries: int) -> QueryFusionRetriever:
    return QueryFusionRetriever([NoRetriever()], llm=FakeLLM(), num_queries=num_queries, similarity_top_k=4)


def streamed(text: str, chunk: int):
    """A ``complete`` that streams ``text`` in ``chunk``-character deltas and honours StopStream."""
    sent: list[str] = []

    async def complete(prompt: str, stream_cb=None) -> str:
        for i in range(0, len(text), chunk):
            sent.append(text[i:i + chunk])
            try:
                stream_cb(sent[-1])
            except StopStream:
                break
        return "".join(sent)

    return complete, sent


async def retrieve_with(retriever: QueryFusionRetriever, text: str, chunk: int) -> tuple[list[str], str]:
    asked: list[str] = []

    async def sub(bundle: QueryBundle) -> list[NodeWithScore]:
        asked.append(bundle.query_str)
        return [NodeWithScore(node=TextNode(text=bundle.query_str, id_=bundle.query_str), score=1.0)]

    complete, sent = streamed(text, chunk)
    await retrieval.fusion_retrieve(retriever, QueryBundle("original"), complete, [sub])
    return asked, "".join(sent)


def test_decode_stops_after_the_kept_lines() -> None:
    text = "first query\nsecond query\nthird line the retriever drops\nand more rambling until max_tokens"
    asked, sent = asyncio.run(retrieve_with(fusion(3), text, chunk=3))
    assert sorted(asked) == sorted(["original", "first query", "second query"])
    assert sent.startswith("first query\nsecond query\n") and len(sent) < len(text) - 20


def test_a_completion_without_enough_lines_is_read_to_the_end() -> None:
    asked, sent = asyncio.run(retrieve_with(fusion(4), "only one\nand two", chunk=2))
    assert sent == "only one\nand two" and sorted(asked) == sorted(["original", "only one", "and two"])


LINES = st.lists(st.sampled_from(["q one", "  q two ", "", "```", "`", "``q``", "three", " "]), max_size=8)
# a completion (lines + an ending), the retriever's num_queries, and the size of each streamed delta
TEXTS = st.builds(lambda lines, tail: "\n".join(lines) + tail, LINES, st.sampled_from(["", "\n", "```", "\n```", "`"]))
COMPLETIONS = given(text=TEXTS, num_queries=st.integers(2, 5), chunk=st.integers(1, 7))


@settings(max_examples=300, deadline=None)
@COMPLETIONS
def test_early_stop_keeps_stock_queries(text, num_queries, chunk) -> None:
    retriever = fusion(num_queries)
    stock = retrieval.parse_queries(retriever, text)
    asked, _ = asyncio.run(retrieve_with(retriever, text, chunk))
    # every query stock retrieves was retrieved (a repeated one may be asked twice), nothing else
    assert set(asked) == {"original", *stock}


def stream_lines(retriever: QueryFusionRetriever, text: str, chunk: int) -> tuple[list[str], str]:
    """The graph path: ``QueryLines`` fed ``chunk``-character deltas until it stops the stream."""
    forwarded: list[str] = []
    lines = retrieval.QueryLines(retriever, forward=forwarded.append)
    for i in range(0, len(text), chunk):
        try:
            lines.on_delta(text[i:i + chunk])
        except StopStream:
            break
    assert "".join(forwarded) == lines.text  # the runtime's part parser saw every delta
    return lines.queries(lines.text), lines.text


@settings(max_examples=300, deadline=None)
@COMPLETIONS
def test_query_lines_stop_keeps_stock_queries(text, num_queries, chunk) -> None:
    retriever = fusion(num_queries)
    queries, read = stream_lines(retriever, text, chunk)
    assert queries == retrieval.parse_queries(retriever, text)
    assert text.startswith(read)


def test_query_lines_stop_right_after_the_last_kept_line() -> None:
    queries, read = stream_lines(fusion(3), "one\ntwo\nthree\nfour", chunk=1)
    assert queries == ["one", "two"] and read == "one\ntwo\n"
