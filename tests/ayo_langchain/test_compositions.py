"""Stock vs optimized on every recognized composition, offline (fake OpenAI server, real embeddings + Chroma)."""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.output_parsers import JsonOutputParser, StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableBranch, RunnableLambda, RunnableParallel, RunnablePassthrough
from lc_helpers import check_equivalent, fake_chat, fake_completion_llm, format_docs, plain

import ayo_langchain

PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer the question using only the context."),
    ("human", "Question: {question}\nContext: {context}\nAnswer:"),
])
QUESTIONS = ["How do I serialize to JSON?", "How can I join paths?"]


class KeywordRetriever(BaseRetriever):
    """A custom retriever class (user code Ayo does not know)."""

    docs: list[Document]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        words = {w.lower().strip("?") for w in query.split()}
        return [d for d in self.docs if words & set(d.page_content.lower().split())][:2]


def test_rag_chain(fake_server: Any, vectorstore: Any) -> None:
    llm = fake_chat(fake_server)
    chain = ({"context": vectorstore.as_retriever(search_kwargs={"k": 2}) | format_docs,
              "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser())
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, QUESTIONS)
    kinds = [n.op.value for n in fast.last_graph]
    assert "embed" in kinds and "search" in kinds and "decode" in kinds
    assert "opaque (0)" in fast.explain()


def test_custom_lambda_in_the_middle_and_itemgetter(fake_server: Any, vectorstore: Any) -> None:
    llm = fake_chat(fake_server)
    shout = RunnableLambda(lambda text: text.upper() + "!")
    chain = ({"context": itemgetter("q") | vectorstore.as_retriever(search_kwargs={"k": 3}) | format_docs,
              "question": itemgetter("q")}
             | PROMPT | llm | StrOutputParser() | shout | PromptTemplate.from_template("Summarize: {text}")
             | llm | StrOutputParser())
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, [{"q": q} for q in QUESTIONS])


def test_custom_retriever_class_is_opaque(fake_server: Any) -> None:
    from lc_helpers import DOCS

    retriever = KeywordRetriever(docs=[Document(page_content=t, metadata={"source": s}) for s, t in DOCS])
    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | fake_chat(fake_server)
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, QUESTIONS)
    assert "KeywordRetriever" in fast.explain()


def test_assign_and_parallel_branches(fake_server: Any, vectorstore: Any) -> None:
    llm = fake_chat(fake_server)
    retriever = vectorstore.as_retriever(search_kwargs={"k": 2})
    chain = (RunnablePassthrough.assign(context=itemgetter("question") | retriever | format_docs)
             | RunnableParallel(answer=PROMPT | llm | StrOutputParser(),
                                short=PROMPT | llm.bind(stop=["\n"]) | StrOutputParser(),
                                question=itemgetter("question")))
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, [{"question": q} for q in QUESTIONS], stream=False)
    # the two model calls are independent nodes of one graph
    assert sum(1 for n in fast.last_graph if n.op.value == "decode") == 2


def test_branch_and_routing_function(fake_server: Any) -> None:
    llm = fake_chat(fake_server)
    json_chain = PromptTemplate.from_template("Say something about json: {topic}") | llm | StrOutputParser()
    other_chain = PromptTemplate.from_template("Say something: {topic}") | llm | StrOutputParser()
    branch = RunnableBranch((lambda x: "json" in x["topic"], json_chain), other_chain)

    def route(x: dict) -> Any:
        return json_chain if "json" in x["topic"] else other_chain

    inputs = [{"topic": "json files"}, {"topic": "paths"}]
    for chain in (branch, {"topic": itemgetter("topic")} | RunnableLambda(route)):
        fast = ayo_langchain.optimize(chain)
        check_equivalent(chain, fast, inputs)
        # invoked, the chosen arm is captured at run time: its model call is a graph node (a
        # stream calls the branch / routing lambda itself, so its arm streams as in stock)
        fast.invoke(inputs[0])
        assert any(n.op.value == "decode" for n in fast.last_trace.graph)


def test_completion_model_and_json_parser(fake_server: Any) -> None:
    llm = fake_completion_llm(fake_server)
    chain = (PromptTemplate.from_template("Return a JSON object about {topic}.") | llm | JsonOutputParser())
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, [{"topic": "json"}, {"topic": "paths"}])


def test_with_config_and_bind(fake_server: Any) -> None:
    llm = fake_chat(fake_server, max_tokens=8)
    chain = (PROMPT | llm.bind(stop=["json"]).with_config(tags=["model"]) | StrOutputParser()).with_config(
        run_name="my_chain")
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, [{"question": q, "context": "none"} for q in QUESTIONS])
    assert fast.get_name() == chain.get_name()


def test_multi_query_retriever(fake_server: Any, vectorstore: Any) -> None:
    from langchain_classic.retrievers import MultiQueryRetriever

    llm = fake_chat(fake_server)
    mq = MultiQueryRetriever.from_llm(retriever=vectorstore.as_retriever(search_kwargs={"k": 2}), llm=llm)
    chain = {"context": mq | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, QUESTIONS)
    graph = fast.last_trace.graph
    assert any(n.meta.get("pipelined") for n in graph), "per-line retrieval must be pipelined with the decode"
    # the retriever alone, with include_original, gives the same documents
    mq2 = MultiQueryRetriever.from_llm(retriever=vectorstore.as_retriever(search_kwargs={"k": 2}), llm=llm,
                                       include_original=True)
    assert plain(ayo_langchain.optimize(mq2).invoke(QUESTIONS[0])) == plain(mq2.invoke(QUESTIONS[0]))


def test_ensemble_retriever(fake_server: Any, vectorstore: Any) -> None:
    from langchain_classic.retrievers import EnsembleRetriever
    from lc_helpers import DOCS

    keyword = KeywordRetriever(docs=[Document(page_content=t, metadata={"source": s}) for s, t in DOCS])
    ens = EnsembleRetriever(retrievers=[vectorstore.as_retriever(search_kwargs={"k": 3}), keyword],
                            weights=[0.7, 0.3])
    chain = {"context": ens | format_docs, "question": RunnablePassthrough()} | PROMPT | fake_chat(fake_server)
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, QUESTIONS)
    assert plain(ayo_langchain.optimize(ens).invoke("json string")) == plain(ens.invoke("json string"))


def test_merger_retriever(fake_server: Any, vectorstore: Any) -> None:
    import asyncio

    from langchain_classic.retrievers import MergerRetriever
    from lc_helpers import DOCS

    keyword = KeywordRetriever(docs=[Document(page_content=t, metadata={"source": s}) for s, t in DOCS])
    merger = MergerRetriever(retrievers=[vectorstore.as_retriever(search_kwargs={"k": 3}), keyword])
    chain = {"context": merger | format_docs, "question": RunnablePassthrough()} | PROMPT | fake_chat(fake_server)
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, QUESTIONS)
    alone = ayo_langchain.optimize(merger)
    assert "Aggregate[MergerRetriever]" in str(alone.explain())
    assert [m.name for m in alone.explain().opaque] == ["KeywordRetriever"]  # the user's own class
    for query in ("json string", "join paths"):
        assert plain(alone.invoke(query)) == plain(merger.invoke(query))
        assert plain(asyncio.run(alone.ainvoke(query))) == plain(asyncio.run(merger.ainvoke(query)))


def test_mmr_retriever_and_async(fake_server: Any, vectorstore: Any) -> None:
    import asyncio

    retriever = vectorstore.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 5})
    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | fake_chat(fake_server)
    fast = ayo_langchain.optimize(chain)

    async def both() -> tuple[Any, Any]:
        stock = await chain.abatch(QUESTIONS, config={"max_concurrency": 1})
        mine = await fast.abatch(QUESTIONS, config={"max_concurrency": 1})
        streamed = [c async for c in fast.astream(QUESTIONS[0])]
        return (plain(stock), plain(mine), plain(streamed))

    stock, mine, streamed = asyncio.run(both())
    assert mine == stock
    assert "".join(c[1] for c in streamed) == stock[0][1]


@pytest.mark.parametrize("kind", ["dict", "lambda"])
def test_top_level_non_sequence(fake_server: Any, kind: str) -> None:
    llm = fake_chat(fake_server)
    if kind == "dict":
        chain: Any = {"a": PromptTemplate.from_template("A {x}") | llm | StrOutputParser(),
                      "b": itemgetter("x")}
        fast = ayo_langchain.optimize(chain)
        chain = RunnableParallel(chain)
    else:
        chain = RunnableLambda(lambda d: d["x"] * 2)
        fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, [{"x": "json"}], stream=False)


def test_assorted_user_patterns(fake_server: Any, vectorstore: Any) -> None:
    """Shapes users write that the other tests do not: chained assigns, pick, nested dicts, a lambda
    taking config, retries and fallbacks (opaque), a generator at the end, a routing lambda
    returning a lambda, documents straight into the output."""
    from collections.abc import Iterator

    from langchain_core.runnables import RunnableConfig, RunnableGenerator

    llm = fake_chat(fake_server)
    retriever = vectorstore.as_retriever(search_kwargs={"k": 2})

    def with_config(x: dict, config: RunnableConfig) -> dict:
        return {**x, "user": (config.get("metadata") or {}).get("user", "nobody")}

    def upper(chunks: Iterator[str]) -> Iterator[str]:
        for c in chunks:
            yield c.upper()

    chains = [
        (RunnablePassthrough.assign(docs=itemgetter("question") | retriever)
         .assign(context=lambda x: format_docs(x["docs"]))
         .assign(answer=PROMPT | llm | StrOutputParser()).pick(["answer", "docs"])),
        ({"outer": {"q": itemgetter("question"), "n": lambda x: len(x["question"])}, "question": itemgetter("question")}
         | RunnableLambda(with_config) | RunnableLambda(lambda x: {"question": x["question"], "context": f"{x['outer']['n']} {x['user']}"})
         | PROMPT | llm.with_retry(stop_after_attempt=2) | StrOutputParser() | RunnableGenerator(upper)),
        ({"context": itemgetter("question") | retriever | format_docs, "question": itemgetter("question")}
         | PROMPT | llm.with_fallbacks([llm]) | StrOutputParser()),
        RunnableLambda(lambda x: RunnableLambda(lambda y: y["question"][::-1]) if x["question"] else llm),
    ]
    inputs = [{"question": q} for q in QUESTIONS]
    for chain in chains:
        fast = ayo_langchain.optimize(chain)
        check_equivalent(chain, fast, inputs)
    # per-input configs in a batch
    chain = chains[1]
    configs = [{"metadata": {"user": "a"}}, {"metadata": {"user": "b"}}]
    assert ayo_langchain.optimize(chain).batch(inputs, configs) == chain.batch(inputs, configs)
