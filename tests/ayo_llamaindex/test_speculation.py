"""Speculative synthesis during LLMRerank's decode: starts on a stable partial selection, is used
only when the final selection reads the same chunks, is cancelled otherwise."""

from __future__ import annotations

import asyncio

from llama_index.core.postprocessor import LLMRerank
from llama_index.core.schema import NodeWithScore, TextNode

from ayo_llamaindex.speculation import RerankSpeculation, chunk_key
from tests.ayo_llamaindex.conftest import FakeLLM


def _setup(texts: list[str], top_n: int = 2, batch: int = 2):
    pp = LLMRerank(llm=FakeLLM(), top_n=top_n, choice_batch_size=batch)
    nodes = [NodeWithScore(node=TextNode(text=t, id_=t), score=1.0) for t in texts]
    batches = pp._get_node_batches(nodes)
    started: list[list[str]] = []

    async def start(ctx, selection):
        started.append([n.node.text for n in selection])
        await asyncio.sleep(0.01)
        return "answer from " + "+".join(n.node.text for n in selection)

    spec = RerankSpeculation(pp, batches, start)
    spec.ctx = object()
    return pp, batches, spec, started


async def test_stable_selection_starts_once_and_is_used() -> None:
    pp, batches, spec, started = _setup(["a", "b", "c", "d"])
    for i, line in enumerate(["Doc: 2, Relevance: 9\n", "Doc: 1, Relevance: 3\n"]):
        spec.on_delta(0, line)
        spec.on_delta(1, ["Doc: 1, Relevance: 1\n", "\n"][i])
    await asyncio.sleep(0)
    assert started == [["b", "a"]]
    final = sorted(pp._parse_raw_response("Doc: 2, Relevance: 9\nDoc: 1, Relevance: 3\n", batches[0])
                   + pp._parse_raw_response("Doc: 1, Relevance: 1\n", batches[1]),
                   key=lambda x: x.score or 0.0, reverse=True)[:2]
    used, text = await spec.take(final)
    assert used and text == "answer from b+a" and spec.hit


async def test_wrong_guess_is_discarded() -> None:
    _, _, spec, started = _setup(["a", "b", "c", "d"])
    spec.on_delta(0, "Doc: 1, Relevance: 5\nDoc: 2, Relevance: 4\n")
    spec.on_delta(0, "\n")
    await asyncio.sleep(0)
    assert started == [["a", "b"]]
    task = spec.task
    final = [NodeWithScore(node=TextNode(text="c", id_="c"), score=9.0),
             NodeWithScore(node=TextNode(text="a", id_="a"), score=5.0)]
    used, _ = await spec.take(final)
    assert not used and spec.task is None
    await asyncio.sleep(0)
    assert task.cancelled()


async def test_no_speculation_without_enough_picks() -> None:
    _, _, spec, started = _setup(["a", "b", "c", "d"], top_n=3)
    spec.on_delta(0, "Doc: 1, Relevance: 5\n")
    spec.on_delta(0, "nothing useful\n")
    await asyncio.sleep(0)
    assert started == [] and spec.task is None
    used, _ = await spec.take([])
    assert not used


def test_chunk_key_is_what_synthesis_reads() -> None:
    n = NodeWithScore(node=TextNode(text="body", metadata={"title": "T"}), score=1.0)
    assert chunk_key([n]) == (n.node.get_content(metadata_mode="llm"),)
