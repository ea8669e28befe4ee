"""The vLLM server killed mid-query (real server, started here: the shared one is never killed).

- Within the user's ``max_retries`` a query rides out the kill: the Ayo-launched server is restarted
  on its port and the retried greedy request returns stock's answer, once.
- Beyond them, every pending query fails within seconds with the stock SDK's exception, whose text
  names the engine (its URL), never a hang; and the restarted server serves the next query.
- The server binds 127.0.0.1 (checked on the live socket).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.llm, pytest.mark.slow, pytest.mark.timeout(1500)]
QUESTION = "Write a long story about a cat who learns to program in Python."


@pytest.fixture(scope="module")
def own_server() -> Iterator[Any]:
    from ayo_core.engines.llm_server import start_server

    server = start_server(dtype="float32", startup_timeout=900, kv_cache_gib=1)
    try:
        yield server
    finally:
        server.stop()


def _running(server: Any) -> float:
    try:
        with urllib.request.urlopen(server.root_url + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    return sum(float(v) for v in re.findall(r"^vllm:num_requests_running\{[^}]*\} ([0-9.e+]+)$", text, flags=re.M))


def _kill_when_running(server: Any, timeout: float = 120.0) -> None:
    """SIGKILL the whole server (API process and engine core) once a request is being decoded."""
    deadline = time.monotonic() + timeout
    while _running(server) < 1:
        assert time.monotonic() < deadline, "no request reached the server"
        time.sleep(0.05)
    time.sleep(0.3)  # mid-decode
    os.killpg(server.proc.pid, signal.SIGKILL)


def _wait_healthy(server: Any, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while not server.healthy():
        assert time.monotonic() < deadline, f"the server was not restarted (restarts {server.restarts})"
        time.sleep(1.0)


def _chain(url: str, max_retries: int, max_tokens: int = 64) -> Any:
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="SmolLM2-135M-Instruct", base_url=url, api_key="none", temperature=0,
                     max_tokens=max_tokens, max_retries=max_retries)
    return ChatPromptTemplate.from_messages([("human", "{q}")]) | llm | StrOutputParser()


def _query_engine(url: str, max_retries: int) -> Any:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(model="SmolLM2-135M-Instruct", api_base=url, api_key="none", is_chat_model=True,
                     temperature=0.0, max_tokens=64, max_retries=max_retries)
    index = VectorStoreIndex.from_documents([Document(text="Cats are curious animals.")],
                                            embed_model=MockEmbedding(embed_dim=8))
    return index.as_query_engine(llm=llm, similarity_top_k=1)


def _traceback_text(exc: BaseException | None) -> str:
    """Messages and notes along the cause chain: what the user's traceback shows (LangChain re-raises
    the SDK's connection error as its own, the SDK's error with Ayo's note as the cause)."""
    parts: list[str] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:  # a chain can loop back on itself
        seen.add(id(exc))
        parts += [str(exc), *getattr(exc, "__notes__", [])]
        exc = exc.__cause__ or exc.__context__
    return " ".join(parts)


def test_server_binds_loopback(own_server: Any) -> None:
    import psutil

    listening = [c.laddr.ip for c in psutil.net_connections("tcp")
                 if c.laddr and c.laddr.port == own_server.port and c.status == psutil.CONN_LISTEN]
    assert listening == ["127.0.0.1"], listening


def test_beyond_max_retries_pending_queries_fail_fast_naming_the_engine(own_server: Any) -> None:
    import ayo_langchain
    import ayo_llamaindex

    url = own_server.base_url
    chain = ayo_langchain.optimize(_chain(url, max_retries=1))
    engine = ayo_llamaindex.optimize(_query_engine(url, max_retries=0))
    calls = [lambda: chain.invoke({"q": QUESTION}), lambda: chain.invoke({"q": QUESTION + " Make it sad."}),
             lambda: engine.query(QUESTION)]
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(c) for c in calls]
        _kill_when_running(own_server)
        killed_at = time.monotonic()
        errors = []
        for fut in futures:
            exc = fut.exception(timeout=60)  # never a hang
            errors.append((exc, time.monotonic() - killed_at))
    for exc, after in errors:
        assert exc is not None, "a query answered although its server was killed mid-decode"
        text = _traceback_text(exc)
        assert own_server.base_url in text or f":{own_server.port}" in text, f"the error does not name the engine: {text}"
        assert after < 20, f"failed only {after:.1f} s after the kill"
    import openai

    assert all(isinstance(exc, openai.APIConnectionError) for exc, _ in errors), [type(e) for e, _ in errors]
    _wait_healthy(own_server)
    assert own_server.restarts >= 1
    assert isinstance(chain.invoke({"q": "Say hi."}), str)  # the same objects work again after the restart


def test_within_max_retries_the_answer_survives_a_restart(own_server: Any) -> None:
    import ayo_langchain

    _wait_healthy(own_server)
    url = own_server.base_url
    reference = _chain(url, max_retries=0).invoke({"q": QUESTION})  # stock, undisturbed
    before = own_server.restarts
    # The SDK's backoff caps at 8 s a retry: 40 retries span a restart on a busy 2-core machine.
    fast = ayo_langchain.optimize(_chain(url, max_retries=40))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(fast.invoke, {"q": QUESTION})
        _kill_when_running(own_server)
        answer = future.result(timeout=900)
    assert own_server.restarts == before + 1
    assert answer == reference
