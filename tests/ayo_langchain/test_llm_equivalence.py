"""Stock vs optimized on the real vLLM server (fp32, eager, greedy): identical outputs.

Each test checks invoke, batch and the concatenated stream (``check_equivalent``) for
one recognized composition; tiny corpora and small ``max_tokens`` keep the suite quick.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableBranch, RunnableLambda, RunnableParallel, RunnablePassthrough
from lc_helpers import DOCS, MODEL, check_equivalent, format_docs, plain

import ayo_langchain

pytestmark = [pytest.mark.llm, pytest.mark.timeout(600)]

PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You are an assistant for question-answering tasks. Use the retrieved context to answer. "
               "If you don't know the answer, say that you don't know. Keep the answer concise."),
    ("human", "Question: {question}\nContext: {context}\nAnswer:"),
])
QUESTIONS = ["How do I serialize an object to JSON?", "How can I join path components?"]


def chat(url: str, max_tokens: int = 24, **kw: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=max_tokens, **kw)


class KeywordRetriever(BaseRetriever):
    docs: list[Document]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        words = {w.lower().strip("?") for w in query.split()}
        return [d for d in self.docs if words & set(d.page_content.lower().split())][:2]


def keyword_retriever() -> KeywordRetriever:
    return KeywordRetriever(docs=[Document(page_content=t, metadata={"source": s}) for s, t in DOCS])


def test_rag_chain(llm_url: str, vectorstore: Any) -> None:
    chain = ({"context": vectorstore.as_retriever(search_kwargs={"k": 2}) | format_docs,
              "question": RunnablePassthrough()} | PROMPT | chat(llm_url) | StrOutputParser())
    check_equivalent(chain, ayo_langchain.optimize(chain), QUESTIONS)


def test_custom_lambda_in_the_middle(llm_url: str, vectorstore: Any) -> None:
    llm = chat(llm_url, max_tokens=16)
    chain = ({"context": itemgetter("q") | vectorstore.as_retriever(search_kwargs={"k": 2}) | format_docs,
              "question": itemgetter("q")}
             | PROMPT | llm | StrOutputParser() | RunnableLambda(lambda text: text.strip().split("\n")[0])
             | PromptTemplate.from_template("Rewrite in five words: {text}") | llm | StrOutputParser())
    check_equivalent(chain, ayo_langchain.optimize(chain), [{"q": q} for q in QUESTIONS])


def test_custom_retriever_class(llm_url: str) -> None:
    chain = ({"context": keyword_retriever() | format_docs, "question": RunnablePassthrough()}
             | PROMPT | chat(llm_url) | StrOutputParser())
    check_equivalent(chain, ayo_langchain.optimize(chain), QUESTIONS)


def test_assign_parallel_and_bind(llm_url: str, vectorstore: Any) -> None:
    llm = chat(llm_url, max_tokens=16)
    chain = (RunnablePassthrough.assign(context=itemgetter("question") | vectorstore.as_retriever() | format_docs)
             | RunnableParallel(answer=PROMPT | llm | StrOutputParser(),
                                first_line=PROMPT | llm.bind(stop=["\n"]) | StrOutputParser()))
    check_equivalent(chain, ayo_langchain.optimize(chain), [{"question": q} for q in QUESTIONS], stream=False)


def test_branch_and_routing(llm_url: str) -> None:
    llm = chat(llm_url, max_tokens=16)
    about_json = PromptTemplate.from_template("Explain JSON in one sentence: {topic}") | llm | StrOutputParser()
    general = PromptTemplate.from_template("Explain in one sentence: {topic}") | llm | StrOutputParser()
    branch = RunnableBranch((lambda x: "json" in x["topic"].lower(), about_json), general)
    routed = RunnableLambda(lambda x: about_json if "json" in x["topic"].lower() else general)
    inputs = [{"topic": "JSON files"}, {"topic": "file paths"}]
    for chain in (branch, routed):
        check_equivalent(chain, ayo_langchain.optimize(chain), inputs)


def test_completion_model(llm_url: str) -> None:
    from langchain_openai import OpenAI

    llm = OpenAI(model=MODEL, base_url=llm_url, api_key="none", temperature=0, max_tokens=16)
    chain = PromptTemplate.from_template("Q: What does {name} do in Python?\nA:") | llm | StrOutputParser()
    check_equivalent(chain, ayo_langchain.optimize(chain), [{"name": "json.dumps"}, {"name": "os.path.join"}])


def test_multi_query_chain(llm_url: str, vectorstore: Any) -> None:
    from langchain_classic.retrievers import MultiQueryRetriever

    llm = chat(llm_url, max_tokens=48)
    mq = MultiQueryRetriever.from_llm(retriever=vectorstore.as_retriever(search_kwargs={"k": 2}), llm=llm)
    chain = ({"context": mq | format_docs, "question": RunnablePassthrough()}
             | PROMPT | chat(llm_url) | StrOutputParser())
    fast = ayo_langchain.optimize(chain)
    check_equivalent(chain, fast, QUESTIONS)
    assert plain(ayo_langchain.optimize(mq).invoke(QUESTIONS[0])) == plain(mq.invoke(QUESTIONS[0]))


def test_ensemble_chain(llm_url: str, vectorstore: Any) -> None:
    from langchain_classic.retrievers import EnsembleRetriever

    ens = EnsembleRetriever(retrievers=[vectorstore.as_retriever(search_kwargs={"k": 2}), keyword_retriever()],
                            weights=[0.6, 0.4])
    chain = {"context": ens | format_docs, "question": RunnablePassthrough()} | PROMPT | chat(llm_url)
    check_equivalent(chain, ayo_langchain.optimize(chain), QUESTIONS)


def test_bad_input_fails_as_stock(llm_url: str, vectorstore: Any) -> None:
    from langchain_core.output_parsers import JsonOutputParser

    def outcome(fn: Any) -> tuple[type, str]:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - compared
            return type(exc), str(exc)
        return type(None), "no error"

    rag = ({"context": vectorstore.as_retriever() | format_docs, "question": RunnablePassthrough()}
           | PROMPT | chat(llm_url) | StrOutputParser())
    not_json = PromptTemplate.from_template("Tell me a short joke about {x}.") | chat(llm_url) | JsonOutputParser()
    cases = [(PROMPT | chat(llm_url), {"question": "json?"}),  # missing prompt variable
             (rag, {"question": "a dict where the retriever wants a string"}),
             (not_json, {"x": "paths"})]  # the parser fails on the model's text
    for chain, value in cases:
        fast = ayo_langchain.optimize(chain)
        want = outcome(lambda c=chain, v=value: c.invoke(v))
        assert want[0] is not type(None)
        assert outcome(lambda f=fast, v=value: f.invoke(v)) == want
