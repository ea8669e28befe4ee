"""Config passes through (callbacks, tags, metadata, run names); explain() and last_trace; capture."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from lc_helpers import fake_chat, format_docs

import ayo_langchain
from ayo_langchain import capture as cap


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, str, tuple[str, ...]]] = []
        self.tokens: list[str] = []
        self.parents: dict[UUID, UUID | None] = {}

    def _add(self, kind: str, name: str, run_id: UUID, parent: UUID | None, tags: list[str] | None) -> None:
        self.events.append((kind, name, tuple(sorted(tags or []))))
        self.parents[run_id] = parent

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       tags: list[str] | None = None, **kw: Any) -> None:
        self._add("chain", kw.get("name") or "", run_id, parent_run_id, tags)

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID,
                            parent_run_id: UUID | None = None, tags: list[str] | None = None, **kw: Any) -> None:
        self._add("chat_model", kw.get("name") or "", run_id, parent_run_id, tags)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kw: Any) -> None:
        self.events.append(("llm_end", response.generations[0][0].text, ()))

    def on_llm_new_token(self, token: str, **kw: Any) -> None:
        self.tokens.append(token)

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                           tags: list[str] | None = None, **kw: Any) -> None:
        self._add("retriever", kw.get("name") or "", run_id, parent_run_id, tags)


PROMPT = ChatPromptTemplate.from_messages([("human", "Question: {question}\nContext: {context}")])


def test_callbacks_see_the_run(fake_server: Any, vectorstore: Any) -> None:
    chain = ({"context": vectorstore.as_retriever(search_kwargs={"k": 2}) | format_docs,
              "question": RunnablePassthrough()} | PROMPT | fake_chat(fake_server) | StrOutputParser())
    fast = ayo_langchain.optimize(chain)
    stock_rec, fast_rec = Recorder(), Recorder()
    config = {"callbacks": [stock_rec], "tags": ["user-tag"], "run_name": "qa", "metadata": {"user": "x"}}
    want = chain.invoke("json?", config=config)
    got = fast.invoke("json?", config={**config, "callbacks": [fast_rec]})
    assert got == want
    ours, theirs = set(fast_rec.events), set(stock_rec.events)
    # every run Ayo reports is one the stock chain reports (same name, same tags)
    assert ours <= theirs, ours - theirs
    kinds = {e[0] for e in ours}
    assert {"chain", "chat_model", "llm_end", "retriever"} <= kinds
    assert ("chain", "qa", ("user-tag",)) in ours
    assert ("llm_end", want, ()) in ours
    # one root run, everything else hangs under it
    assert sum(1 for p in fast_rec.parents.values() if p is None) == 1


def test_streaming_tokens_reach_callbacks(fake_server: Any) -> None:
    chain = PromptTemplate.from_template("{q}") | fake_chat(fake_server) | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    rec = Recorder()
    chunks = list(fast.stream({"q": "tokens please"}, config={"callbacks": [rec]}))
    assert "".join(rec.tokens) == "".join(chunks) == chain.invoke({"q": "tokens please"})


def test_explain_and_last_trace(fake_server: Any, vectorstore: Any) -> None:
    chain = ({"context": vectorstore.as_retriever() | format_docs, "question": RunnablePassthrough()}
             | PROMPT | FakeListChatModel(responses=["fine"]) | StrOutputParser())
    fast = ayo_langchain.optimize(chain)
    text = fast.explain()
    assert "FakeListChatModel" in text and "opaque (1)" in text and "not ChatOpenAI" in text
    assert fast.invoke("json?") == "fine"
    summary = fast.last_trace.summary()
    assert summary["status"] == "done" and summary["critical_path_bound_s"] <= summary["latency_s"] + 1e-6
    assert "last trace" in fast.explain()


def test_capture_tree() -> None:
    chain = ({"a": RunnableLambda(lambda x: x), "b": RunnablePassthrough()}
             | PromptTemplate.from_template("{a}{b}") | FakeListChatModel(responses=["x"]))
    module, opaque = cap.capture(chain)
    assert isinstance(module, cap.Sequence)
    assert [type(s) for s in module.steps] == [cap.Parallel, cap.Prompt, cap.Opaque]
    assert isinstance(module.steps[0].branches["b"], cap.Identity)
    assert len(opaque) == 1


def test_capture_gives_the_core_module_graph() -> None:
    model = FakeListChatModel(responses=["x"])
    chain = ({"a": RunnableLambda(lambda x: x), "b": RunnablePassthrough()}
             | PromptTemplate.from_template("{a}{b}") | model | StrOutputParser())
    graph = ayo_langchain.optimize(chain).plan.modules
    kinds = [(m.name, m.kind) for m in graph.modules()]
    assert kinds == [("root", "Sequence"), ("root.0", "Parallel"), ("root.0.a", "Transform"),
                     ("root.0.b", "Transform"), ("root.1", "Transform"), ("root.2", "Opaque"),
                     ("root.3", "Transform")]
    (opaque,) = graph.opaque()
    assert opaque.obj is model and "not ChatOpenAI" in opaque.reason


def test_every_captured_module_class_has_a_lowering() -> None:
    from ayo_langchain.lower import LOWERINGS

    classes = [c for c in vars(cap).values() if isinstance(c, type) and issubclass(c, cap.Module)]
    assert [c.__name__ for c in classes if c is not cap.Module and c not in LOWERINGS] == []
    assert [c.__name__ for c in classes if c is not cap.Module and c not in cap.TEMPLATES] == []


def test_listeners_binding_stays_opaque_and_works() -> None:
    seen: list[Any] = []
    inner = RunnableLambda(lambda x: x + 1).with_listeners(on_end=lambda run: seen.append(run.outputs))
    chain = RunnableLambda(lambda x: x * 2) | inner
    fast = ayo_langchain.optimize(chain)
    assert fast.invoke(3) == chain.invoke(3) == 7
    assert len(seen) == 2
    assert "listeners" in fast.explain()


def test_astream_events_and_bare_model(fake_server: Any) -> None:
    import asyncio

    llm = fake_chat(fake_server)
    chain = PromptTemplate.from_template("Say {x}") | llm | StrOutputParser()
    fast = ayo_langchain.optimize(chain)

    async def kinds(r: Any) -> set[str]:
        return {e["event"] async for e in r.astream_events({"x": "hi"}, version="v2")}

    assert asyncio.run(kinds(fast)) == asyncio.run(kinds(chain))
    bare = ayo_langchain.optimize(llm)
    want = llm.invoke("hello").content
    assert bare.invoke("hello").content == want
    assert "".join(c.content for c in bare.stream("hello")) == want
