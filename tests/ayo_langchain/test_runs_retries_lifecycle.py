"""What production users rely on beyond the value, stock vs optimized.

* callbacks: the leaf runs (prompt, chat model, retriever, lambda, parser) with the same
  payloads, names, tags, metadata; token usage totals; ``on_llm_new_token``; errors;
* concurrency and lifecycle: ``max_concurrency``, ``return_exceptions``, threads,
  ``asyncio.gather``, several ``asyncio.run``, cancellation, bounded state;
* retries: a ``ChatOpenAI(max_retries=N)`` gets its 429/5xx retried, as stock.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler, UsageMetadataCallbackHandler, get_usage_metadata_callback
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableBranch, RunnableLambda, RunnableParallel, RunnablePassthrough
from lc_helpers import MODEL, fake_chat, fake_completion_llm, format_docs

import ayo_langchain
from tests.stub_http import JSONHandler, LoopbackServer, sse

PROMPT = ChatPromptTemplate.from_messages([("human", "Context: {context}\nQuestion: {question}")])
LEAF_KINDS = ("chat", "llm", "retriever")


class Recorder(BaseCallbackHandler):
    """Every start event with its payload, every end/error, every token."""

    def __init__(self) -> None:
        self.runs: dict[UUID, tuple[str, str, UUID | None]] = {}
        self.starts: list[tuple[Any, ...]] = []
        self.ends: list[tuple[Any, ...]] = []
        self.tokens: list[str] = []

    def _start(self, kind: str, serialized: Any, payload: Any, run_id: UUID, parent_run_id: UUID | None,
               tags: list[str] | None, metadata: dict | None, name: str | None) -> None:
        self.runs[run_id] = (kind, name or "", parent_run_id)
        self.starts.append((kind, name, tuple(sorted(tags or [])), json.dumps(metadata or {}, sort_keys=True),
                            json.dumps(serialized, sort_keys=True, default=str), repr(payload), run_id, parent_run_id))

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       tags: list[str] | None = None, metadata: dict | None = None, **kw: Any) -> None:
        self._start("chain", serialized, inputs, run_id, parent_run_id, tags, metadata, kw.get("name"))

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID,
                            parent_run_id: UUID | None = None, tags: list[str] | None = None,
                            metadata: dict | None = None, **kw: Any) -> None:
        self._start("chat", serialized, messages, run_id, parent_run_id, tags, metadata, kw.get("name"))

    def on_llm_start(self, serialized: Any, prompts: list[str], *, run_id: UUID, parent_run_id: UUID | None = None,
                     tags: list[str] | None = None, metadata: dict | None = None, **kw: Any) -> None:
        self._start("llm", serialized, prompts, run_id, parent_run_id, tags, metadata, kw.get("name"))

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                           tags: list[str] | None = None, metadata: dict | None = None, **kw: Any) -> None:
        self._start("retriever", serialized, query, run_id, parent_run_id, tags, metadata, kw.get("name"))

    def on_llm_new_token(self, token: str, **kw: Any) -> None:
        self.tokens.append(token)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kw: Any) -> None:
        self.ends.append(("llm_end", self.runs[run_id][1], response.generations[0][0].text,
                          json.dumps((response.llm_output or {}).get("token_usage"), sort_keys=True)))

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kw: Any) -> None:
        self.ends.append(("retriever_end", self.runs[run_id][1], tuple(d.page_content for d in documents)))

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kw: Any) -> None:
        self.ends.append(("chain_end", self.runs[run_id][1], repr(outputs)))

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self.ends.append(("chain_error", self.runs[run_id][1], repr(error)))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self.ends.append(("llm_error", self.runs[run_id][1], repr(error)))

    def leaves(self) -> Counter:
        """Leaf starts (everything but the run ids), as a multiset."""
        return Counter(s[:6] for s in self.starts if s[0] in LEAF_KINDS or s[1] in ("RunnableLambda", "top")
                       or s[0] == "chain" and s[4] != "null")

    def linkage(self, skip: set[str]) -> Counter:
        """Each run's nearest ancestor that is not one of the ``skip`` runs (composites Ayo does
        not report): (run kind, name, tags) -> (ancestor kind, name)."""
        out: Counter = Counter()
        for kind, name, tags, *_rest, parent in self.starts:
            while parent is not None and self.runs[parent][1] in skip:
                parent = self.runs[parent][2]
            if name not in skip:
                out[(kind, name, tags, self.runs[parent][:2] if parent else None)] += 1
        return out

    def root_linkage_ok(self) -> bool:
        """Exactly one root run; every other run's parent is a run of this trace."""
        roots = [r for r, (_, _, parent) in self.runs.items() if parent is None]
        return len(roots) == 1 and all(p in self.runs for _, _, p in self.runs.values() if p is not None)


def _rag(fake_server: Any, vectorstore: Any) -> Any:
    retriever = vectorstore.as_retriever(search_kwargs={"k": 2})
    return ({"context": retriever | format_docs, "question": RunnablePassthrough()}
            | PROMPT | fake_chat(fake_server) | StrOutputParser())


def _chains(fake_server: Any, vectorstore: Any) -> dict[str, tuple[Any, Any]]:
    llm = fake_chat(fake_server)
    say = ChatPromptTemplate.from_template("Say {question}")
    parallel = RunnableParallel(a=PROMPT | llm | StrOutputParser(), b=say | llm | StrOutputParser())
    branch = RunnableBranch((lambda x: "json" in x["question"], say | llm),
                            ChatPromptTemplate.from_template("Other {question}") | llm) | StrOutputParser()
    from langchain_classic.retrievers.multi_query import MultiQueryRetriever

    multi = MultiQueryRetriever.from_llm(retriever=vectorstore.as_retriever(search_kwargs={"k": 2}), llm=llm)
    completion = PROMPT | fake_completion_llm(fake_server) | StrOutputParser()
    return {"rag": (_rag(fake_server, vectorstore), "what does json.dumps do?"),
            "multiquery": ({"context": multi | format_docs, "question": RunnablePassthrough()} | PROMPT | llm
                           | StrOutputParser(), "how do I parse json?"),
            "completion": (completion, {"context": "c", "question": "hi"}),
            "ensemble": ({"context": _ensemble(vectorstore) | format_docs, "question": RunnablePassthrough()}
                         | PROMPT | llm | StrOutputParser(), "how do I join paths?"),
            "merger": ({"context": _merger(vectorstore) | format_docs, "question": RunnablePassthrough()}
                       | PROMPT | llm | StrOutputParser(), "how do I join paths?"),
            "parallel": (parallel, {"context": "c", "question": "hi"}),
            "branch": (branch, {"question": "json?"})}


def _merger(vectorstore: Any) -> Any:
    from langchain_classic.retrievers import MergerRetriever

    return MergerRetriever(retrievers=[vectorstore.as_retriever(search_kwargs={"k": 2}),
                                       vectorstore.as_retriever(search_type="mmr", search_kwargs={"k": 3})])


def _ensemble(vectorstore: Any) -> Any:
    from langchain_classic.retrievers import EnsembleRetriever

    return EnsembleRetriever(retrievers=[vectorstore.as_retriever(search_kwargs={"k": 2}),
                                         vectorstore.as_retriever(search_type="mmr", search_kwargs={"k": 2})],
                             weights=[0.6, 0.4])


CONFIG = {"tags": ["user"], "metadata": {"who": "me"}, "run_name": "top"}


def _record(runnable: Any, x: Any, method: str) -> tuple[Any, Recorder]:
    rec = Recorder()
    config = {**CONFIG, "callbacks": [rec]}
    if method == "invoke":
        value = runnable.invoke(x, config)
    elif method == "ainvoke":
        value = asyncio.run(runnable.ainvoke(x, config))
    else:
        value = "".join(runnable.stream(x, config))
    return value, rec


# ---- callbacks ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rag", "multiquery", "ensemble", "merger", "parallel", "branch", "completion"])
@pytest.mark.parametrize("method", ["invoke", "ainvoke"])
def test_leaf_callbacks_match_stock(fake_server: Any, vectorstore: Any, name: str, method: str) -> None:
    chain, x = _chains(fake_server, vectorstore)[name]
    fast = ayo_langchain.optimize(chain)
    want, stock = _record(chain, x, method)
    got, ours = _record(fast, x, method)
    assert got == want
    # the prompts/messages the models get, serialized objects, names, tags, metadata: as stock
    assert ours.leaves() == stock.leaves()
    # every leaf's end (llm text and usage, retrieved documents) as stock
    leaf_ends = {"llm_end", "retriever_end"}
    assert Counter(e for e in ours.ends if e[0] in leaf_ends) == Counter(e for e in stock.ends if e[0] in leaf_ends)
    assert ours.root_linkage_ok() and stock.root_linkage_ok()
    # every run, the composites Ayo splits into nodes included, under the same parent run as in stock
    assert ours.linkage(set()) == stock.linkage(set())
    def chain_ends(rec: Recorder) -> Counter:  # a message's id names its run (lc_run--<run id>): random
        return Counter((e[1], re.sub(r"lc_run--[0-9a-f-]+", "lc_run--", e[2])) for e in rec.ends if e[0] == "chain_end")

    assert chain_ends(ours) == chain_ends(stock)


def test_streamed_tokens_match_stock(fake_server: Any, vectorstore: Any) -> None:
    chain = _rag(fake_server, vectorstore)
    fast = ayo_langchain.optimize(chain)
    want, stock = _record(chain, "what is re?", "stream")
    got, ours = _record(fast, "what is re?", "stream")
    assert got == want
    assert "".join(ours.tokens) == "".join(stock.tokens) == want


def test_usage_totals_match_stock(fake_server: Any, vectorstore: Any) -> None:
    from langchain_community.callbacks import get_openai_callback

    chain = _rag(fake_server, vectorstore)
    fast = ayo_langchain.optimize(chain)

    def usage(r: Any) -> tuple[Any, ...]:
        handler = UsageMetadataCallbackHandler()
        r.invoke("json?", {"callbacks": [handler]})
        with get_usage_metadata_callback() as ctx:
            r.batch(["a?", "b?"])
            asyncio.run(r.ainvoke("c?"))
            list(r.stream("d?"))
        with get_openai_callback() as oai:
            r.invoke("e?")
        return (handler.usage_metadata, ctx.usage_metadata,
                (oai.prompt_tokens, oai.completion_tokens, oai.total_tokens, oai.successful_requests))

    want = usage(chain)
    assert want[0][MODEL]["total_tokens"] > 0 and want[1][MODEL]["total_tokens"] > 0 and want[2][3] == 1
    assert usage(fast) == want


def test_usage_context_is_per_thread(fake_server: Any, vectorstore: Any) -> None:
    """Sync calls run on Ayo's loop thread: each caller's context (its usage counter) must go along."""
    from concurrent.futures import ThreadPoolExecutor

    chain = _rag(fake_server, vectorstore)
    fast = ayo_langchain.optimize(chain)
    questions = [f"what is {m}?" for m in ("json", "re", "os", "argparse", "hashlib", "datetime")]

    def counted(r: Any, q: str, times: int) -> Any:
        with get_usage_metadata_callback() as ctx:
            for _ in range(times):
                r.invoke(q)
        return ctx.usage_metadata

    want = [counted(chain, q, i % 3 + 1) for i, q in enumerate(questions)]
    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(lambda iq: counted(fast, iq[1], iq[0] % 3 + 1), enumerate(questions)))
    assert got == want


def test_errors_reach_error_callbacks(fake_server: Any) -> None:
    def boom(x: Any) -> Any:
        raise ValueError(f"no {x['question']}")

    chain = RunnableParallel(a=RunnableLambda(boom), b=PROMPT | fake_chat(fake_server)) | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    reports = []
    for r in (chain, fast):
        rec = Recorder()
        with pytest.raises(ValueError, match="no q"):
            r.invoke({"question": "q", "context": "c"}, {"callbacks": [rec], "run_name": "top"})
        reports.append({e for e in rec.ends if e[0] == "chain_error" and e[1] in ("top", "boom")})
    assert reports[1] == reports[0] and len(reports[0]) == 2


def test_astream_events_of_leaves_match_stock(fake_server: Any, vectorstore: Any) -> None:
    chain = _rag(fake_server, vectorstore)
    fast = ayo_langchain.optimize(chain)

    async def events(r: Any, **kw: Any) -> Counter:
        return Counter([(e["event"], e["name"], tuple(sorted(e["tags"])))
                        async for e in r.astream_events("json?", version="v2", **kw)
                        if not e["event"].endswith("_stream")])

    want = asyncio.run(events(chain, include_types=["chat_model", "retriever", "prompt", "parser"]))
    assert asyncio.run(events(fast, include_types=["chat_model", "retriever", "prompt", "parser"])) == want
    want = asyncio.run(events(chain, include_names=["ChatOpenAI", "VectorStoreRetriever"]))
    assert asyncio.run(events(fast, include_names=["ChatOpenAI", "VectorStoreRetriever"])) == want


# ---- concurrency and lifecycle -------------------------------------------------------------------


class InFlight:
    """Counts inputs between the first and the last step of a chain (thread-safe)."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self._lock = threading.Lock()

    def enter(self, x: Any) -> Any:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        return x

    def leave(self, x: Any) -> Any:
        with self._lock:
            self.now -= 1
        return x


def _fails_on_bad(x: dict) -> dict:
    if "bad" in x["question"]:
        raise ValueError(f"bad input {x['question']}")
    return x


def _counted(fake_server: Any, counter: InFlight) -> Any:
    return (RunnableLambda(counter.enter) | RunnableLambda(_fails_on_bad)
            | ChatPromptTemplate.from_template("Say {question}") | fake_chat(fake_server) | StrOutputParser()
            | RunnableLambda(counter.leave))


def test_batch_honours_max_concurrency(fake_server: Any) -> None:
    fake_server.stream_delay = 0.002
    counter = InFlight()
    fast = ayo_langchain.optimize(_counted(fake_server, counter))
    inputs = [{"question": f"w{i}"} for i in range(8)]
    want = _counted(fake_server, InFlight()).batch(inputs)
    assert fast.batch(inputs, {"max_concurrency": 2}) == want
    assert counter.peak <= 2
    counter.peak = 0
    assert asyncio.run(fast.abatch(inputs, {"max_concurrency": 3})) == want
    assert counter.peak <= 3


def test_batch_return_exceptions_as_stock(fake_server: Any) -> None:
    chain = _counted(fake_server, InFlight())
    fast = ayo_langchain.optimize(chain)
    inputs = [{"question": q} for q in ("a", "bad1", "b", "bad2")]

    def shown(values: list[Any]) -> list[Any]:
        return [repr(v) if isinstance(v, Exception) else v for v in values]

    want = shown(chain.batch(inputs, return_exceptions=True))
    assert shown(fast.batch(inputs, return_exceptions=True)) == want
    assert shown(asyncio.run(fast.abatch(inputs, return_exceptions=True))) == want
    with pytest.raises(ValueError, match="bad input bad1"):
        fast.batch(inputs)


def test_threads_gather_and_several_event_loops(fake_server: Any, vectorstore: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    chain = _rag(fake_server, vectorstore)
    fast = ayo_langchain.optimize(chain)
    questions = [f"what is {m}?" for m in ("json", "re", "os", "argparse")]
    want = [chain.invoke(q) for q in questions]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(fast.invoke, questions * 2)) == want * 2

    async def gathered() -> list[Any]:
        return await asyncio.gather(*(fast.ainvoke(q) for q in questions * 2))

    for _ in range(3):  # each asyncio.run is a new loop: the runtime and clients follow it
        assert asyncio.run(gathered()) == want * 2
    assert fast.invoke(questions[0]) == want[0]


def test_cancelled_call_leaves_nothing_behind(fake_server: Any) -> None:
    fake_server.stream_delay = 0.05  # about 2 s per streamed answer
    async def slow_for_some(x: dict) -> dict:
        if x["question"] == "slow":
            await asyncio.sleep(1.0)
        return x

    chain = (RunnableLambda(lambda x: x, afunc=slow_for_some) | ChatPromptTemplate.from_template("Say {question}")
             | fake_chat(fake_server) | StrOutputParser())
    fast = ayo_langchain.optimize(chain)

    async def main() -> list[str]:
        problems: list[str] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: problems.append(ctx["message"]))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(_drain(fast.astream({"question": "slow stream"})), 0.2)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(fast.ainvoke({"question": "slow"}), 0.1)
        await asyncio.sleep(0.2)
        problems += [repr(t) for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        fake_server.stream_delay = 0.0
        assert await fast.ainvoke({"question": "after"}) == await chain.ainvoke({"question": "after"})
        return problems

    assert asyncio.run(main()) == []
    fake_server.stream_delay = 0.05
    for _ in fast.stream({"question": "sync break"}):
        break  # a sync stream left early: later calls still work
    fake_server.stream_delay = 0.0
    assert fast.invoke({"question": "again"}) == chain.invoke({"question": "again"})


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


def test_state_stays_bounded_over_many_calls(fake_server: Any) -> None:
    import gc

    llm = fake_chat(fake_server, max_tokens=2)
    chain = RunnableParallel(a=ChatPromptTemplate.from_template("Say {q}") | llm | StrOutputParser(), b=lambda x: x)
    fast = ayo_langchain.optimize(chain)

    def alive() -> int:
        gc.collect()
        return len(gc.get_objects())

    for i in range(50):
        fast.invoke({"q": f"w{i}"})
    before = alive()
    for i in range(200):
        fast.invoke({"q": f"x{i}"})
    fake_server.requests.clear()  # the fake server's own log is not Ayo's state
    assert alive() - before < 2000  # ~10 objects per call would be a leak
    assert len(fast.last_traces) == 1 and len(fast.plan._dynamic) == 0


# ---- retries -------------------------------------------------------------------------------------


class FlakyOpenAI(LoopbackServer):
    """Loopback OpenAI-style chat server answering its first requests with ``fail_first`` statuses."""

    def __init__(self, fail_first: tuple[int, ...] = ()) -> None:
        self.bodies: list[dict] = []
        self.failures = list(fail_first)
        server = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.json_body()
                server.bodies.append(body)
                if server.failures:
                    self.reply(server.failures.pop(0), b'{"error": {"message": "busy, try again"}}',
                               {"retry-after-ms": "10"})
                elif body.get("stream"):
                    events = [{"id": "x", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
                               "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": f}]}
                              for t, f in (("Hel", None), ("lo", None), ("", "stop"))]
                    self.reply(200, sse(events), kind="text/event-stream")
                else:
                    self.reply(200, json.dumps({
                        "id": "x", "object": "chat.completion", "created": 0, "model": MODEL,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode())

        super().__init__(Handler)


@pytest.fixture
def flaky() -> Iterator[FlakyOpenAI]:
    server = FlakyOpenAI()
    yield server
    server.close()


def _flaky_chain(server: FlakyOpenAI, retries: int) -> Any:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=server.url, api_key="none", temperature=0, max_tokens=4,
                     max_retries=retries)
    return ChatPromptTemplate.from_template("Say {question}") | llm | StrOutputParser()


def _outcome(call: Any) -> Any:
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - compared with stock's
        return (type(exc), str(exc))


@pytest.mark.parametrize("method", ["invoke", "stream"])
@pytest.mark.parametrize(("retries", "failures"), [(2, (503,)), (2, (429, 500)), (1, (503, 503)), (0, (503,)),
                                                   (2, (400, 400))])  # a 400 is for good
def test_retries_as_stock(flaky: FlakyOpenAI, method: str, retries: int, failures: tuple[int, ...]) -> None:
    chain = _flaky_chain(flaky, retries)
    fast = ayo_langchain.optimize(chain)

    def run(r: Any) -> Any:
        if method == "stream":
            return _outcome(lambda: "".join(r.stream({"question": "hi"})))
        return _outcome(lambda: r.invoke({"question": "hi"}))

    results = []
    for r in (chain, fast):
        flaky.failures, flaky.bodies = list(failures), []
        results.append((run(r), len(flaky.bodies)))
    assert results[1] == results[0]  # the same answer or SDK error, after as many requests


_THREAD_AT_EXIT = """
import sys, threading, time
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_openai import ChatOpenAI
import ayo_langchain

llm = ChatOpenAI(model=sys.argv[2], base_url=sys.argv[1], api_key="none", max_tokens=4, max_retries=0)
fast = ayo_langchain.optimize(RunnableLambda(lambda x: x) | ChatPromptTemplate.from_template("Say {q}") | llm
                              | StrOutputParser())

def work():
    time.sleep(0.5)  # the main thread has ended by now: Python is about to join this thread
    print([fast.invoke({"q": str(i)}) for i in range(3)], fast.batch([{"q": "a"}, {"q": "b"}]), flush=True)

threading.Thread(target=work).start()
"""


def _run_script(tmp_path: Any, script: str, *args: str) -> Any:
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "script.py"
    path.write_text(script)
    root = Path(ayo_langchain.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=120,
                          cwd=root, env=env)


def test_a_thread_still_calling_after_main_ends(flaky: FlakyOpenAI, tmp_path: Any) -> None:
    """Python shuts thread pools down before it joins non-daemon threads: the calls still work."""
    done = _run_script(tmp_path, _THREAD_AT_EXIT, flaky.url, MODEL)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['Hello', 'Hello', 'Hello'] ['Hello', 'Hello']", done.stderr[-2000:]


# ---- the real server -------------------------------------------------------------------------------

_EXIT_SCRIPT = """
import asyncio, sys, threading, time
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_openai import ChatOpenAI
import ayo_langchain

llm = ChatOpenAI(model=sys.argv[2], base_url=sys.argv[1], api_key="none", temperature=0, max_tokens=200)
fast = ayo_langchain.optimize(ChatPromptTemplate.from_template("Write a long story about {q}") | llm
                              | StrOutputParser())
print(fast.invoke({"q": "a cat"}, {"configurable": {}})[:10])

async def main():
    asyncio.ensure_future(fast.ainvoke({"q": "a dog"}))  # still running when the loop closes
    await asyncio.sleep(0.3)

asyncio.run(main())
threading.Thread(target=fast.invoke, args=({"q": "a cow"},), daemon=True).start()
stream = fast.stream({"q": "a bird"})
next(stream)  # a stream left open at exit
time.sleep(0.3)
"""


@pytest.mark.llm
def test_interpreter_exits_cleanly_with_calls_in_flight(llm_url: str, tmp_path: Any) -> None:
    import time

    t0 = time.monotonic()
    done = _run_script(tmp_path, _EXIT_SCRIPT, llm_url, MODEL)
    assert done.returncode == 0, done.stderr[-2000:]
    # at most the open stream's answer is waited for (as stock's executor thread waits for it)
    assert time.monotonic() - t0 < 90
    for bad in ("never retrieved", "was destroyed but it is pending", "Traceback"):
        assert bad not in done.stderr, done.stderr[-2000:]


@pytest.mark.llm
def test_callbacks_and_usage_on_the_real_server(llm_url: str, embeddings: Any) -> None:
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=llm_url, api_key="none", temperature=0, max_tokens=16)
    store = InMemoryVectorStore(embeddings)
    store.add_texts(["json.dumps serializes to JSON.", "os.path.join joins paths.", "re.compile compiles."])
    chain = ({"context": store.as_retriever(search_kwargs={"k": 2}) | format_docs, "question": RunnablePassthrough()}
             | PROMPT | llm | StrOutputParser())
    fast = ayo_langchain.optimize(chain)
    for method in ("invoke", "stream"):
        want, stock = _record(chain, "what does json.dumps do?", method)
        got, ours = _record(fast, "what does json.dumps do?", method)
        assert got == want
        if method == "invoke":
            assert ours.leaves() == stock.leaves()
        else:  # the streamed tokens' text; fast may add one empty token at a max_tokens stop (README)
            assert "".join(ours.tokens) == "".join(stock.tokens) == want

    def usage(r: Any) -> Any:
        with get_usage_metadata_callback() as ctx:
            r.invoke("what is re?")
            r.batch(["what is os?", "what is json?"])
        return {k: {f: v[f] for f in ("input_tokens", "output_tokens", "total_tokens")}
                for k, v in ctx.usage_metadata.items()}

    assert usage(fast) == usage(chain)


def test_server_down_as_stock() -> None:
    import socket

    from langchain_openai import ChatOpenAI

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = ChatOpenAI(model=MODEL, base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_tokens=4,
                     max_retries=1)
    chain = ChatPromptTemplate.from_template("Say {question}") | llm | StrOutputParser()
    fast = ayo_langchain.optimize(chain)
    want = _outcome(lambda: chain.invoke({"question": "hi"}))
    assert "ConnectionError" in want[0].__name__
    assert _outcome(lambda: fast.invoke({"question": "hi"})) == want
    assert _outcome(lambda: "".join(fast.stream({"question": "hi"}))) == want


def test_http_error_in_later_event_loops_as_stock(flaky: FlakyOpenAI) -> None:
    """A 4xx under ainvoke in a second asyncio.run: the model's pooled connection belongs to the
    first, closed loop; the SDK's exception must still be the server's error (stock's retries
    recover the stale connection; a fallback without them raised a connection error)."""
    chain = _flaky_chain(flaky, 2)
    fast = ayo_langchain.optimize(chain)
    outcomes = []
    for r in (chain, fast):
        for _ in range(3):
            flaky.failures = [404] * 4
            outcomes.append(_outcome(lambda r=r: asyncio.run(r.ainvoke({"question": "hi"}))))
    assert outcomes[0][0].__name__ == "OpenAIModelNotFoundError" or "NotFound" in outcomes[0][0].__name__
    assert outcomes[3:] == outcomes[:3]
