"""The LlamaIndex case: ``index.as_query_engine(...)`` over a vector index, a user postprocessor, ``OpenAILike``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.callbacks import CallbackManager
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

import ayo_llamaindex
from tests.adapters.common import DOCS, Event, Knobs, event_paths
from tests.ayo_langchain.lc_helpers import MODEL


class EventRecorder(BaseCallbackHandler):
    """Every CallbackManager event (type, parent), and which ones ended."""

    def __init__(self) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self.reset()

    def reset(self) -> None:
        self.runs: dict[str, tuple[str, str]] = {}
        self.order: list[str] = []
        self.ended: set[str] = set()
        self.payloads: list[tuple[str, str, Any]] = []  # (event type, start|end, payload summary)

    def on_event_start(self, event_type: Any, payload: Any = None, event_id: str = "", parent_id: str = "",
                       **kwargs: Any) -> str:
        self.runs[event_id] = (event_type.value, parent_id)
        self.order.append(event_id)
        self.payloads.append((event_type.value, "start", summary(payload)))
        return event_id

    def on_event_end(self, event_type: Any, payload: Any = None, event_id: str = "", **kwargs: Any) -> None:
        self.ended.add(event_id)
        self.payloads.append((event_type.value, "end", summary(payload)))

    def start_trace(self, trace_id: str | None = None) -> None:
        pass

    def end_trace(self, trace_id: str | None = None, trace_map: dict[str, list[str]] | None = None) -> None:
        pass

    def paths(self) -> list[Event]:
        labelled = {i: (label if i in self.ended else f"{label} (unfinished)", parent)
                    for i, (label, parent) in self.runs.items()}
        return event_paths(labelled, self.order)


def summary(value: Any) -> Any:
    """What a user's handler reads in a payload, in comparable form: nodes as (id, score to 1e-5, text),
    messages as (role, content), responses as their text; the rest as it is (repr for objects)."""
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse
    from llama_index.core.base.response.schema import Response

    if isinstance(value, dict):
        return tuple(sorted((str(k), summary(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(summary(v) for v in value)
    if isinstance(value, NodeWithScore):
        return ("node", value.node.node_id, round(value.score or 0.0, 5), value.node.get_content())
    if isinstance(value, ChatMessage):
        return ("message", str(value.role), value.content)
    if isinstance(value, (ChatResponse, CompletionResponse)):
        return ("llm response", str(value))
    if isinstance(value, Response):
        return ("response", value.response, summary(value.source_nodes), tuple(sorted(value.metadata or {})))
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return type(value).__name__


class UserPostprocessor(BaseNodePostprocessor):
    """A postprocessor Ayo does not know (runs as-is): keeps the nodes, after ``knobs.delay``, unless ``knobs.fail``."""

    knobs: Any = None

    def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
                           ) -> list[NodeWithScore]:
        time.sleep(self.knobs.delay)
        if self.knobs.fail:
            raise self.knobs.error(query_bundle.query_str if query_bundle else "")
        return nodes

    async def _apostprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
                                  ) -> list[NodeWithScore]:
        await asyncio.sleep(self.knobs.delay)
        if self.knobs.fail:
            raise self.knobs.error(query_bundle.query_str if query_bundle else "")
        return nodes


@dataclass
class LlamaIndexWorld:
    """What every LlamaIndex pipeline of the session shares: the model server, the index, the event handler."""

    url: str
    index: VectorStoreIndex
    recorder: EventRecorder = field(default_factory=EventRecorder)

    @classmethod
    def make(cls, url: str) -> LlamaIndexWorld:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding

        from ayo_core.models import embedding_model_path

        world = cls(url, index=None)  # type: ignore[arg-type]
        with world.reporting():
            emb = HuggingFaceEmbedding(model_name=str(embedding_model_path()), device="cpu")
            world.index = VectorStoreIndex.from_documents([Document(text=t, id_=s) for s, t in DOCS], embed_model=emb)
        return world

    @contextmanager
    def reporting(self) -> Iterator[None]:
        """Objects made inside report to the recorder (through ``Settings``, as users set it up)."""
        old = Settings.callback_manager
        Settings.callback_manager = CallbackManager([self.recorder])
        try:
            yield
        finally:
            Settings.callback_manager = old


class LlamaIndexCase:
    name = "llamaindex"
    recognized = ("VectorIndexRetriever", "OpenAILike", "retrieve", "synthesize")
    unreported_events: frozenset[str] = frozenset()
    known_differences: dict[str, str] = {}

    def __init__(self, world: LlamaIndexWorld, knobs: Knobs) -> None:
        self.world, self.knobs = world, knobs

    def build_stock(self, streaming: bool = False) -> Any:
        from llama_index.llms.openai_like import OpenAILike

        with self.world.reporting():
            llm = OpenAILike(model=MODEL, api_base=self.world.url, api_key="none", is_chat_model=True,
                             temperature=0.0, max_tokens=40, context_window=4096, max_retries=0)
            return self.world.index.as_query_engine(llm=llm, similarity_top_k=2, streaming=streaming,
                                                    node_postprocessors=[UserPostprocessor(knobs=self.knobs)])

    def optimize(self, stock: Any) -> Any:
        return ayo_llamaindex.optimize(stock)

    def call(self, obj: Any, question: str) -> str:
        return str(obj.query(question))

    async def acall(self, obj: Any, question: str) -> str:
        return str(await obj.aquery(question))

    def stream(self, obj: Any, question: str) -> list[str]:
        return list(obj.query(question).response_gen)

    async def astream(self, obj: Any, question: str) -> list[str]:
        response = await obj.aquery(question)
        return [text async for text in response.async_response_gen()]

    def events(self, obj: Any, question: str) -> list[Event]:
        self.world.recorder.reset()
        obj.query(question)
        return self.world.recorder.paths()

    def payloads(self, obj: Any, question: str) -> list[tuple]:
        self.world.recorder.reset()
        obj.query(question)
        return sorted(self.world.recorder.payloads, key=repr)

    def bad_input(self, obj: Any) -> Any:
        return obj.query("")  # stock embeds nothing and the vector store's similarity fails

    def explain(self, obj: Any) -> str:
        return str(obj.explain())

    def trace(self, obj: Any) -> Any:
        return obj.last_trace


class LlamaIndexChatCase(LlamaIndexCase):
    """The same pipeline as a chat engine (``index.as_chat_engine(chat_mode="context")``): each call is
    the first turn of a fresh conversation (``reset()`` first), so stock and Ayo see the same history."""

    name = "llamaindex-chat"
    recognized = ("chat_engine", "context", "VectorIndexRetriever")

    def build_stock(self, streaming: bool = False) -> Any:
        from llama_index.llms.openai_like import OpenAILike

        with self.world.reporting():
            llm = OpenAILike(model=MODEL, api_base=self.world.url, api_key="none", is_chat_model=True,
                             temperature=0.0, max_tokens=40, context_window=4096, max_retries=0)
            return self.world.index.as_chat_engine(chat_mode="context", llm=llm, similarity_top_k=2,
                                                   node_postprocessors=[UserPostprocessor(knobs=self.knobs)])

    def call(self, obj: Any, question: str) -> str:
        obj.reset()
        return str(obj.chat(question))

    async def acall(self, obj: Any, question: str) -> str:
        obj.reset()
        return str(await obj.achat(question))

    def stream(self, obj: Any, question: str) -> list[str]:
        obj.reset()
        return list(obj.stream_chat(question).response_gen)

    async def astream(self, obj: Any, question: str) -> list[str]:
        obj.reset()
        response = await obj.astream_chat(question)
        return [text async for text in response.async_response_gen()]

    def events(self, obj: Any, question: str) -> list[Event]:
        obj.reset()
        self.world.recorder.reset()
        obj.chat(question)
        return self.world.recorder.paths()

    def payloads(self, obj: Any, question: str) -> list[tuple]:
        obj.reset()
        self.world.recorder.reset()
        obj.chat(question)
        return sorted(self.world.recorder.payloads, key=repr)

    def bad_input(self, obj: Any) -> Any:
        obj.reset()
        return obj.chat("")
