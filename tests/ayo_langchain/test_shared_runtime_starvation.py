"""Two separately optimized LangChain chains and a LlamaIndex query engine on one vLLM server, with
foreign stock traffic: one engine and one LLM scheduler serve both adapters, and no request of
Ayo's is sent with a priority worse than the foreign clients' default (vLLM serves lower first;
the LangChain adapter used to send raw slack priorities > 0, which starves behind foreign load).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_openai import ChatOpenAI
from llama_index.core import Document, VectorStoreIndex
from llama_index.llms.openai_like import OpenAILike

import ayo_langchain
import ayo_llamaindex
from ayo_core.engines import get_llm_engine, http_client
from ayo_core.runtime import bridge, shared_schedulers
from tests.ayo_llamaindex.li_helpers import QUESTIONS, TEXTS

pytestmark = pytest.mark.llm
MODEL = "SmolLM2-135M-Instruct"
MAX_TOKENS = 24
FOREIGN_TOKENS = 64
ANSWER_MARK, FACTS_MARK = "Answer in one sentence", "Name two facts about"


def chains(url: str) -> tuple[Any, Any]:
    def chat() -> ChatOpenAI:
        return ChatOpenAI(model=MODEL, base_url=url, api_key="none", temperature=0, max_tokens=MAX_TOKENS)

    answer = ChatPromptTemplate.from_template(ANSWER_MARK + ": {question}") | chat() | StrOutputParser()
    facts = ChatPromptTemplate.from_template(FACTS_MARK + " {topic}.") | chat() | StrOutputParser()
    return answer, facts


def query_engine(url: str) -> Any:
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    from ayo_core.models import embedding_model_path

    embed = HuggingFaceEmbedding(model_name=str(embedding_model_path()), device="cpu")
    index = VectorStoreIndex.from_documents([Document(text=t, id_=f"d{i}") for i, t in enumerate(TEXTS)],
                                            embed_model=embed)
    llm = OpenAILike(model=MODEL, api_base=url, api_key="none", is_chat_model=True, temperature=0.0,
                     max_tokens=MAX_TOKENS)
    return index.as_query_engine(llm=llm, similarity_top_k=2)


def foreign_request(url: str, i: int) -> None:
    """A stock client's request: no priority (vLLM's default 0)."""
    body = {"model": MODEL, "max_tokens": FOREIGN_TOKENS, "temperature": 0,
            "messages": [{"role": "user", "content": f"Write a long story about the number {i}."}]}
    httpx.post(f"{url}/chat/completions", json=body, timeout=300).raise_for_status()


def run_together(calls: list[Callable[[], Any]]) -> list[float]:
    """Start every call at once (one thread each); the seconds each took."""
    def timed(call: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        call()
        return time.perf_counter() - t0

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(timed, calls))


def workload(url: str, answer: Any, facts: Any, qe: Any, traces: list[Any] | None = None) -> list[Callable[[], Any]]:
    def llamaindex_queries() -> None:
        for q in QUESTIONS:
            qe.query(q)
            if traces is not None:
                traces.append(qe.last_trace)

    def batch(chain: Any, inputs: list[dict[str, str]]) -> Callable[[], None]:
        def call() -> None:
            chain.batch(inputs)
            if traces is not None:
                traces.extend(chain.last_traces)
        return call

    return [batch(answer, [{"question": q} for q in QUESTIONS]),
            batch(facts, [{"topic": t} for t in ("JSON", "heaps")]), llamaindex_queries,
            *[(lambda i=i: foreign_request(url, i)) for i in range(6)]]


@pytest.fixture
def sent_priorities(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str]]:
    """(priority, request text) of every generation request Ayo's engines put on the wire."""
    sent: list[tuple[Any, str]] = []
    lock = threading.Lock()
    post, stream = http_client.AsyncHTTPClient.post, http_client.AsyncHTTPClient.stream

    def record(url: str, body: dict[str, Any]) -> None:
        if url.endswith(("/chat/completions", "/completions")):
            with lock:
                sent.append((body.get("priority"), json.dumps(body.get("messages") or body.get("prompt"))))

    async def recorded_post(self: Any, url: str, json: Any) -> Any:  # noqa: A002 - httpx's name
        record(url, json)
        return await post(self, url, json=json)

    def recorded_stream(self: Any, method: str, url: str, json: Any) -> Any:  # noqa: A002
        record(url, json)
        return stream(self, method, url, json=json)

    monkeypatch.setattr(http_client.AsyncHTTPClient, "post", recorded_post)
    monkeypatch.setattr(http_client.AsyncHTTPClient, "stream", recorded_stream)
    return sent


def test_two_chains_and_a_query_engine_share_one_engine_and_never_starve(llm_url: str,
                                                                         sent_priorities: list) -> None:
    answer, facts = chains(llm_url)
    qe = query_engine(llm_url)
    qe.query(QUESTIONS[0])  # warm-ups: model weights, prefix cache, embedding model
    answer.invoke({"question": QUESTIONS[0]})
    slowest_stock = max(run_together(workload(llm_url, answer, facts, qe)))

    fast_answer, fast_facts = ayo_langchain.optimize(answer), ayo_langchain.optimize(facts)
    fast_qe = ayo_llamaindex.optimize(qe)
    engine = get_llm_engine(llm_url, model=MODEL)
    assert fast_answer.plan.llm is engine and fast_facts.plan.llm is engine  # one LLMEngine per server

    fast_qe.query(QUESTIONS[0])
    fast_answer.invoke({"question": QUESTIONS[0]})
    scheduler = [s for s in shared_schedulers(bridge.loop()) if s.engine is engine]
    assert len(scheduler) == 1, scheduler  # both adapters' sync calls meet in one LLM scheduler
    before = scheduler[0].statistics().submitted
    sent_priorities.clear()

    traces: list[Any] = []
    took = run_together(workload(llm_url, fast_answer, fast_facts, fast_qe, traces))
    slowest_foreign = max(took[-6:])  # the stock clients' requests of this very run (same machine load)
    calls = [c for t in traces for c in t.engine_calls if c.engine == "llm"]
    queries = {c.query for c in calls}
    assert len(queries) == 6 and scheduler[0].statistics().submitted - before == len(calls)

    priorities = [p for p, _ in sent_priorities]
    assert len(priorities) == len(calls) and all(p is not None and p <= 0 for p in priorities), sent_priorities
    for mark in (ANSWER_MARK, FACTS_MARK):  # the LangChain chains' own requests, not only LlamaIndex's
        assert [p for p, text in sent_priorities if mark in text], mark
    waited = max(c.queued + (c.end - c.start) for c in calls)
    # starved behind the foreign traffic, a request of ours would wait about as long as the slowest
    # foreign request of the same run; the stock run's slowest request is the bound (on a
    # loaded machine the two runs see different loads, so either bound shows no starvation)
    assert waited <= max(slowest_stock, slowest_foreign), (waited, slowest_stock, slowest_foreign)
