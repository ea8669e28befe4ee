"""Shared by the LlamaIndex adapter tests (``from tests.ayo_llamaindex.li_helpers import ...``; conftest.py's fixtures use
them too): a deterministic fake LLM, a tiny corpus and the stock-vs-optimized comparison."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback

TEXTS = [
    "The json module encodes Python objects as JSON strings with json.dumps and decodes them with json.loads.",
    "The pathlib module offers classes representing filesystem paths with semantics for different systems.",
    "The heapq module implements the heap queue algorithm, also known as the priority queue algorithm.",
    "The bisect module keeps a list in sorted order without having to sort the list after each insertion.",
    "The csv module reads and writes tabular data in the comma separated values format used by spreadsheets.",
    "The pickle module serializes and de-serializes Python object structures into a binary byte stream.",
]
QUESTIONS = ["How do I turn Python objects into JSON?", "How can a list stay sorted?"]


SELECT = "Using only the choices above and not prior knowledge, return"
SUB_QUESTIONS = "# Example 2\n<Tools>\n```json\n"


class FakeLLM(CustomLLM):
    """Deterministic, fast, offline: answers depend only on the prompt.

    Query-generation prompts get several lines of queries; choice-select prompts get
    'Doc: i, Relevance: r' lines; selector prompts a JSON list of choices (the first, or the first two);
    sub-question prompts one JSON sub-question per tool; anything else a short digest of the prompt.
    """

    context_window: int = 3900
    num_output: int = 64
    is_chat: bool = False

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=self.num_output,
                           is_chat_model=self.is_chat, model_name="fake")

    @staticmethod
    def answer(prompt: str) -> str:
        digest = hashlib.sha1(prompt.encode()).hexdigest()[:8]
        if "search queries" in prompt:
            return f"```\nfirst query {digest}\n\nsecond query about sorting\nthird {digest[:3]}\n```"
        if SELECT in prompt:  # LLMSingleSelector / LLMMultiSelector: a JSON list of choices
            picks = [1, 2] if "return the top choices" in prompt else [1]
            return json.dumps([{"choice": c, "reason": f"choice {c} fits {digest}"} for c in picks])
        if SUB_QUESTIONS in prompt:  # LLMQuestionGenerator: one sub-question per tool, as its parser reads them
            tools = json.loads(prompt.split(SUB_QUESTIONS, 1)[1].split("\n```", 1)[0])
            items = [{"sub_question": f"What does {name} say ({digest[:4]})?", "tool_name": name} for name in tools]
            return "```json\n" + json.dumps({"items": items}) + "\n```"
        if "Document 1" in prompt or "Doc:" in prompt:
            n = len(re.findall(r"Document \d+:", prompt))
            return "\n".join(f"Doc: {i}, Relevance: {(i * 7 + int(digest[0], 16)) % 10}" for i in range(1, n + 1))
        return f"answer {digest}"

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self.answer(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
        text = self.answer(prompt)
        yield CompletionResponse(text=text, delta=text)





def node_ids(response: Any) -> list[str]:
    return [n.node.node_id for n in response.source_nodes]


def assert_same(stock: Any, fast: Any, by: str = "id") -> None:
    """Same text, same source nodes (ids, or contents for per-call indexes), same scores."""
    assert str(fast) == str(stock)
    assert type(fast) is type(stock)
    if by == "id":
        assert node_ids(fast) == node_ids(stock)
    else:
        assert [n.node.get_content() for n in fast.source_nodes] == [n.node.get_content() for n in stock.source_nodes]
    for a, b in zip(stock.source_nodes, fast.source_nodes, strict=True):
        assert (a.score is None) == (b.score is None)
        if a.score is not None:
            assert b.score == pytest.approx(a.score, abs=1e-5)


def compare(stock_engine: Any, fast_engine: Any, questions: list[str] = QUESTIONS, by: str = "id") -> None:
    for q in questions:
        assert_same(stock_engine.query(q), fast_engine.query(q), by=by)


class EventNames(BaseEventHandler):
    """Records the class name of every instrumentation event it handles (add it to a dispatcher)."""

    names: list[str] = []

    @classmethod
    def class_name(cls) -> str:
        return "EventNames"

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.names.append(type(event).__name__)
