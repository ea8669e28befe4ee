"""search_augmented — LangChain: rewrite the question into web-search queries, search, answer.

``MultiQueryRetriever`` has the model write search queries (one per line) and runs
each against a web-search API — here the loopback search service
(``ayo_examples.search_service``: HTTP JSON over BM25, with a search API's latency),
called by a small custom retriever. The answer prompt gets the results. Stock
LangChain (LCEL) code; the optimized app is the same chain after one line:
``ayo_langchain.optimize(chain)``.

    python -m examples.search_augmented            # stock, first question
    python -m examples.search_augmented --ayo      # optimized
"""

from __future__ import annotations

from typing import Any

import httpx
from langchain_classic.retrievers.multi_query import MultiQueryRetriever
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnablePassthrough
from langchain_openai import ChatOpenAI

from .common import EnginesConfig, answer_text

FRAMEWORK = "langchain"

QUERY_PROMPT = PromptTemplate.from_template(
    "Write 3 short web search queries that would find the answer to this question about Python's "
    "standard library. Write one query per line and nothing else.\nQuestion: {question}"
)
ANSWER_PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You answer questions about Python's standard library using web search results."),
    ("human", "Question: {question}\n\nSearch results:\n{context}\n\nAnswer the question in a few sentences."),
])


class WebSearchRetriever(BaseRetriever):
    """Calls a web-search HTTP API: GET {url}/search?q=...&k=... -> {"results": [...]}."""

    url: str
    k: int = 2

    def _to_documents(self, payload: dict[str, Any]) -> list[Document]:
        return [Document(page_content=r["text"], metadata={"id": r["id"], "title": r["title"]})
                for r in payload["results"]]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        response = httpx.get(f"{self.url}/search", params={"q": query, "k": self.k}, timeout=30)
        response.raise_for_status()
        return self._to_documents(response.json())

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.get(f"{self.url}/search", params={"q": query, "k": self.k})
        response.raise_for_status()
        return self._to_documents(response.json())


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(f"[{d.metadata['title']}] {d.page_content[:600]}" for d in docs[:4])


def build_stock(cfg: EnginesConfig) -> Runnable:
    llm = ChatOpenAI(model=cfg.model, base_url=cfg.llm_url, api_key="unused", temperature=0.0,
                     max_tokens=cfg.max_tokens)
    if not cfg.search_url:
        raise ValueError("search_augmented needs EnginesConfig.search_url: start ayo_examples.search_service.SearchService")
    retriever = MultiQueryRetriever.from_llm(
        retriever=WebSearchRetriever(url=cfg.search_url), llm=llm, prompt=QUERY_PROMPT
    )
    return (
        RunnablePassthrough.assign(context=(lambda x: x["question"]) | retriever | format_docs)
        | ANSWER_PROMPT
        | llm
        | StrOutputParser()
    )


def build_optimized(cfg: EnginesConfig) -> Runnable:
    import ayo_langchain

    return ayo_langchain.optimize(build_stock(cfg))


def run(app: Any, item: dict[str, Any]) -> str:
    return answer_text(app.invoke({"question": item["question"]}))


async def arun(app: Any, item: dict[str, Any]) -> str:
    return answer_text(await app.ainvoke({"question": item["question"]}))


if __name__ == "__main__":
    import sys

    from .common import main_for

    main_for(sys.modules[__name__])
