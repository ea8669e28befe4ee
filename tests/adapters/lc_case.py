"""The LangChain case: ``tidy | {"context": retriever | format_docs, "question": ...} | prompt | ChatOpenAI | StrOutputParser()``."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

import ayo_langchain
from tests.adapters.common import DOCS, Event, Knobs, event_paths
from tests.ayo_langchain.lc_helpers import FakeOpenAIServer, fake_chat, format_docs

_IDS = re.compile(r"(lc_run--|run-)[0-9a-f-]{36}")  # a message's id names its run: random in both
PROMPT = ChatPromptTemplate.from_messages([("human", "Context: {context}\nQuestion: {question}")])


def make_vectorstore(folder: Path) -> Any:
    """A Chroma collection of ``DOCS`` in ``folder``, over the stock HuggingFace embeddings."""
    import chromadb
    from langchain_chroma import Chroma
    from langchain_huggingface import HuggingFaceEmbeddings

    from ayo_core import models

    embeddings = HuggingFaceEmbeddings(model_name=str(models.embedding_model_path()))
    store = Chroma(collection_name="docs", embedding_function=embeddings,
                   client=chromadb.PersistentClient(path=str(folder)))
    store.add_texts([text for _, text in DOCS], metadatas=[{"source": src} for src, _ in DOCS],
                    ids=[src for src, _ in DOCS])
    return store


class EventRecorder(BaseCallbackHandler):
    """Every run a callback handler sees (kind and name, parent), and which ones ended or failed."""

    def __init__(self) -> None:
        self.runs: dict[UUID, tuple[str, UUID | None]] = {}
        self.order: list[UUID] = []
        self.outcome: dict[UUID, str] = {}
        self.payloads: list[tuple[str, str, str]] = []  # (run label, start|end, what the hook got)

    def _payload(self, run_id: UUID, when: str, value: Any) -> None:
        self.payloads.append((self.runs[run_id][0], when, _IDS.sub(r"\1<id>", repr(value))))

    def _start(self, kind: str, run_id: UUID, parent_run_id: UUID | None, name: str | None) -> None:
        self.runs[run_id] = (f"{kind}:{name or ''}", parent_run_id)
        self.order.append(run_id)

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       **kw: Any) -> None:
        self._start("chain", run_id, parent_run_id, kw.get("name"))
        self._payload(run_id, "start", (inputs, kw.get("tags"), kw.get("metadata")))

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID,
                            parent_run_id: UUID | None = None, **kw: Any) -> None:
        self._start("chat_model", run_id, parent_run_id, kw.get("name"))
        self._payload(run_id, "start", (messages, kw.get("tags"), kw.get("metadata"), kw.get("invocation_params")))

    def on_llm_start(self, serialized: Any, prompts: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kw: Any) -> None:
        self._start("llm", run_id, parent_run_id, kw.get("name"))

    def on_retriever_start(self, serialized: Any, query: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                           **kw: Any) -> None:
        self._start("retriever", run_id, parent_run_id, kw.get("name"))
        self._payload(run_id, "start", (query, kw.get("tags"), kw.get("metadata")))

    def _end(self, run_id: UUID, how: str) -> None:
        self.outcome[run_id] = how

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kw: Any) -> None:
        self._end(run_id, "end")
        self._payload(run_id, "end", outputs)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kw: Any) -> None:
        self._end(run_id, "end")
        self._payload(run_id, "end", response)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kw: Any) -> None:
        self._end(run_id, "end")
        self._payload(run_id, "end", documents)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self._end(run_id, "error")

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self._end(run_id, "error")

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self._end(run_id, "error")

    def paths(self) -> list[Event]:
        labelled = {r: (label if self.outcome.get(r) == "end" else f"{label} ({self.outcome.get(r, 'unfinished')})",
                        parent) for r, (label, parent) in self.runs.items()}
        return event_paths(labelled, self.order)


class LangChainCase:
    name = "langchain"
    recognized = ("VectorStoreRetriever", "ChatOpenAI", "ChatPromptTemplate", "StrOutputParser")
    # every run stock reports, the composites Ayo splits into nodes included (tests/ayo_langchain/test_history.py,
    # test_runs_retries_lifecycle.py)
    unreported_events: frozenset[str] = frozenset()
    known_differences: dict[str, str] = {}

    def __init__(self, fake: FakeOpenAIServer, vectorstore: Any, knobs: Knobs) -> None:
        self.fake, self.vectorstore, self.knobs = fake, vectorstore, knobs

    def build_stock(self, streaming: bool = False) -> Any:  # every LCEL chain streams
        knobs = self.knobs

        def tidy(question: Any) -> Any:
            time.sleep(knobs.delay)
            if knobs.fail:
                raise knobs.error(question)
            return question

        async def atidy(question: Any) -> Any:
            await asyncio.sleep(knobs.delay)
            if knobs.fail:
                raise knobs.error(question)
            return question

        retriever = self.vectorstore.as_retriever(search_kwargs={"k": 2})
        return (RunnableLambda(tidy, afunc=atidy, name="tidy")
                | {"context": retriever | format_docs, "question": RunnablePassthrough()}
                | PROMPT | fake_chat(self.fake) | StrOutputParser())

    def optimize(self, stock: Any) -> Any:
        return ayo_langchain.optimize(stock)

    def call(self, obj: Any, question: str) -> str:
        return obj.invoke(question)

    async def acall(self, obj: Any, question: str) -> str:
        return await obj.ainvoke(question)

    def stream(self, obj: Any, question: str) -> list[str]:
        return list(obj.stream(question))

    async def astream(self, obj: Any, question: str) -> list[str]:
        return [chunk async for chunk in obj.astream(question)]

    def events(self, obj: Any, question: str) -> list[Event]:
        recorder = EventRecorder()
        obj.invoke(question, {"callbacks": [recorder], "run_name": "rag"})  # the root: not "RunnableSequence"
        return recorder.paths()

    def payloads(self, obj: Any, question: str) -> list[tuple]:
        recorder = EventRecorder()
        obj.invoke(question, {"callbacks": [recorder], "run_name": "rag", "tags": ["user"], "metadata": {"who": "me"}})
        return sorted(recorder.payloads)

    def bad_input(self, obj: Any) -> Any:
        return obj.invoke({"question": "not a string"})  # a dict reaches the vector retriever

    def explain(self, obj: Any) -> str:
        return str(obj.explain())

    def trace(self, obj: Any) -> Any:
        return obj.last_trace
