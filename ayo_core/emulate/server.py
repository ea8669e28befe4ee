"""``ayo emulate serve``: an emulated vLLM + embedding deployment over the real HTTP protocols.

One FastAPI/uvicorn process (vLLM's own stack) serves ``/v1/chat/completions`` and
``/v1/completions`` (streamed and not, vLLM 0.32's shapes), ``/v1/embeddings`` (OpenAI's),
``/v1/models``, ``/tokenize``, ``/detokenize``, ``/metrics`` (``vllm:cache_config_info``, so Ayo's
capability detection works unchanged), ``/server_info`` (the profile's device, which Ayo's device
rule reads), ``/reset_prefix_cache``, ``/health`` and ``/version``.

Two modes (``POST /emulate/mode``):

* ``record``: every request goes to the real engines (``--upstream`` vLLM, the real embedding model)
  in real time, and the answer is stored (:mod:`.recording`). This is also the *proxy* mode that the
  emulation is validated against: same endpoints, real engines, real time.
* ``replay``: answers come from the store, token for token, on the profile's clock
  (:class:`~ayo_core.emulate.step_engine.StepEngine`, or a hosted API's timing). A request the store
  cannot answer is proxied (counted as a miss) when an upstream is configured, else answered with an
  error that names it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from ayo_core.emulate import shapes
from ayo_core.emulate.devices import EmbeddingDevice, HostedEngine
from ayo_core.emulate.embeddings import EmbeddingBackend, embeddings_response, parse_embedding_request
from ayo_core.emulate.profile import Profile
from ayo_core.emulate.proxy import record_model_request
from ayo_core.emulate.recording import Recording, RecordStore, exact_key, request_key, without_delivery
from ayo_core.emulate.step_engine import StepEngine

log = logging.getLogger(__name__)
MODES = ("record", "replay")


class Emulator:
    """The emulated deployment's state: its profile, store, mode, engines and counters."""

    def __init__(self, profile: Profile, store: RecordStore, mode: str = "replay", upstream: str | None = None,
                 embedder: EmbeddingBackend | None = None, served_model: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown emulator mode {mode!r}: use one of {MODES}")
        self.profile, self.store, self.mode = profile, store, mode
        self.upstream = upstream.rstrip("/").removesuffix("/v1") if upstream else None
        self.embedder = embedder
        self.served_model = served_model
        self.engine: StepEngine | HostedEngine = (
            HostedEngine(profile.hosted) if profile.hosted is not None else StepEngine(profile.llm, block=profile.prefix_block))
        self.embed_device = EmbeddingDevice(profile.embed)
        self.counts = {"replayed": 0, "recorded": 0, "misses_proxied": 0, "misses_failed": 0, "embed_texts": 0}
        self.client: httpx.AsyncClient | None = None

    def http(self) -> httpx.AsyncClient:
        if self.client is None:
            self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=30), limits=httpx.Limits(
                max_connections=1024, max_keepalive_connections=256))
        return self.client

    def stats(self) -> dict[str, Any]:
        engine = self.engine
        return {"mode": self.mode, "profile": self.profile.describe(), **self.counts,
                "llm_steps": getattr(engine, "steps", None), "llm_busy_s": getattr(engine, "busy_s", None),
                "embed_batches": self.embed_device.batches, "embed_busy_s": self.embed_device.busy_s}

    # ---- model requests ----------------------------------------------------------------------
    async def model_request(self, path: str, body: dict[str, Any], request: Request) -> Response:
        if (problem := self._check(path, body)) is not None:
            return problem
        key = request_key(path, body)
        limit = body.get("max_tokens", body.get("max_completion_tokens"))
        rec = self.store.models.get(key)
        if self.mode == "replay" and rec is not None and rec.covers(limit):
            self.counts["replayed"] += 1
            return await self._replay(path, body, rec, limit, request)
        exact = self.store.exact.get(exact_key(path, without_delivery(body)))
        if self.mode == "replay" and exact is not None:  # an error the real server gave this request
            return JSONResponse(exact[1], status_code=exact[0])
        if self.mode == "replay":
            if self.upstream is None:
                self.counts["misses_failed"] += 1
                return self._miss(path, body, rec, limit)
            self.counts["misses_proxied"] += 1
        else:
            self.counts["recorded"] += 1
        return await self._record(path, body, key)

    def _check(self, path: str, body: Any) -> Response | None:
        if not isinstance(body, dict):
            return JSONResponse(shapes.error(400, "the request body must be a JSON object", "Bad Request", "body"), 400)
        field = "messages" if path == shapes.CHAT else "prompt"
        if path == shapes.CHAT and not isinstance(body.get("messages"), list):
            msg = "1 validation error:\n  {'type': 'list_type', 'loc': 'body.messages', 'msg': 'Input should be a valid list'}"
            return JSONResponse(shapes.error(400, msg, "Bad Request", "body.messages"), 400)
        if field not in body:
            msg = f"1 validation error:\n  {{'type': 'missing', 'loc': 'body.{field}', 'msg': 'Field required'}}"
            return JSONResponse(shapes.error(400, msg, "Bad Request", f"body.{field}"), 400)
        model = body.get("model")
        if self.served_model and model not in (None, self.served_model):
            msg = f"The model `{model}` does not exist. Valid aliases: {self.served_model}."
            return JSONResponse(shapes.error(404, msg, "NotFoundError", "model"), 404)
        return None

    def _miss(self, path: str, body: dict[str, Any], rec: Recording | None, limit: Any) -> Response:
        first = _first_text(body)
        why = (f"the recording has {rec.tokens} tokens and ends by {rec.finish_reason or 'a client hang-up'}; "
               f"this request asks for max_tokens={limit}") if rec is not None else "no recording of this request"
        msg = (f"ayo emulate (replay, no upstream): {why}: POST {path} model={body.get('model')!r} "
               f"starting {first!r}. Record it first: run the same workload with the emulator in record mode "
               f"(`ayo emulate serve --mode record --upstream URL`), or give replay an --upstream for misses")
        log.warning(msg)
        return JSONResponse(shapes.error(400, msg, "EmulatorReplayMiss", "body"), 400)

    async def _replay(self, path: str, body: dict[str, Any], rec: Recording, limit: Any, request: Request) -> Response:
        served, finish, stop_reason = rec.served(limit)
        n_out = int(served[-1][1]) if served else 0
        budget = int(limit) if limit is not None else n_out + 1
        produced: asyncio.Queue[int] = asyncio.Queue()
        task = asyncio.create_task(self.engine.generate(rec.prompt_ids or [0] * rec.prompt_tokens, n_out, budget,
                                                        int(body.get("priority") or 0),
                                                        lambda k: produced.put_nowait(k + 1)))
        model = str(body.get("model") or self.served_model or "")
        if not body.get("stream"):
            try:
                result = await task
            finally:
                task.cancel()
            return JSONResponse(shapes.response_body(path, served, finish, stop_reason, model, rec.prompt_tokens,
                                                     result.cached, _created_cache(rec, result.cached), rec.extras))
        options = body.get("stream_options") or {}
        chunks = shapes.stream_chunks(path, served, finish, stop_reason, options, rec.prompt_tokens, rec.extras)
        return StreamingResponse(self._timed_stream(path, chunks, task, produced, options, model, rec),
                                 media_type="text/event-stream")

    async def _timed_stream(self, path: str, chunks: list[tuple[int, dict]], task: asyncio.Task,
                            produced: asyncio.Queue, options: dict[str, Any], model: str, rec: Recording) -> Any:
        have = 0
        try:
            for needed, chunk in chunks:
                while have < needed and not (task.done() and produced.empty()):
                    have = await _next_token(produced, task)
                yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"
            result = await task
            if options.get("include_usage"):
                ident = chunks[0][1]["id"] if chunks else shapes.new_id(path)
                final = shapes.final_usage_chunk(path, model, ident, rec.prompt_tokens, result.emitted, result.cached,
                                                 _created_cache(rec, result.cached), rec.extras)
                yield f"data: {json.dumps(final, separators=(',', ':'))}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            task.cancel()  # a client that hung up (an early stop) frees its sequence at the next step

    async def _record(self, path: str, body: dict[str, Any], key: str) -> Response:
        return await record_model_request(self, path, body, key)

    # ---- other endpoints -----------------------------------------------------------------------
    async def exact_request(self, method: str, path: str, body: Any) -> Response:
        """Endpoints answered per exact request (``/tokenize``, ``/v1/models``...): recorded, replayed."""
        key = exact_key(f"{method} {path}", body)
        known = self.store.exact.get(key)
        if self.mode == "replay" and known is not None:
            return JSONResponse(known[1], status_code=known[0])
        if self.upstream is None:
            msg = f"ayo emulate (replay, no upstream): no recorded answer for {method} {path}; record it first"
            return JSONResponse(shapes.error(400, msg, "EmulatorReplayMiss", None), 400)
        resp = await self.http().request(method, self.upstream + path, json=body if method == "POST" else None)
        try:
            payload = resp.json()
        except ValueError:
            return Response(resp.content, status_code=resp.status_code, media_type=resp.headers.get("content-type"))
        self.store.add_exact(key, resp.status_code, payload)
        return JSONResponse(payload, status_code=resp.status_code)

    async def embeddings(self, body: Any) -> Response:
        parsed = parse_embedding_request(body)
        if isinstance(parsed, Response):
            return parsed
        model, texts, encoding = parsed
        vectors = [self.store.vector(model, t) for t in texts]
        missing = [t for t, v in zip(texts, vectors, strict=True) if v is None]
        self.counts["embed_texts"] += len(texts)
        if self.mode == "replay" and not missing:
            await self.embed_device.run(len(texts), sum(len(t) // 4 + 1 for t in texts))
        elif self.embedder is None:
            msg = (f"ayo emulate: no vectors recorded for {len(missing)} of {len(texts)} texts (first {missing[0][:60]!r}) "
                   f"and no embedding model to compute them: start it with --embed-model PATH")
            return JSONResponse(shapes.error(400, msg, "EmulatorReplayMiss", "input"), 400)
        else:
            computed = await self.embedder.embed(missing)
            for text, vec in zip(missing, computed, strict=True):
                self.store.add_vector(model, text, vec)
            vectors = [self.store.vector(model, t) for t in texts]
        return JSONResponse(embeddings_response(model, texts, vectors, encoding))

    def metrics(self) -> str:
        engine = self.engine
        block = self.profile.prefix_block
        return "\n".join([
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig (emulated: ayo emulate)",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{block}",enable_prefix_caching="True",engine="0",'
            f'emulated_profile="{self.profile.name}"}} 1.0',
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{engine="0"}} {float(engine.active)}',
            "# TYPE vllm:num_requests_waiting gauge",
            f'vllm:num_requests_waiting{{engine="0"}} {float(engine.waiting)}', ""])


async def _next_token(produced: asyncio.Queue, task: asyncio.Task) -> int:
    getter = asyncio.ensure_future(produced.get())
    done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
    if getter in done:
        return getter.result()
    getter.cancel()
    task.result()  # raises what the engine raised
    return 1 << 30  # the engine finished: nothing more will come


def _created_cache(rec: Recording, cached: int) -> int | None:
    return (rec.prompt_tokens - cached) or None


def _first_text(body: dict[str, Any]) -> str:
    if isinstance(body.get("messages"), list) and body["messages"]:
        content = body["messages"][0].get("content") if isinstance(body["messages"][0], dict) else ""
        return str(content)[:80]
    return str(body.get("prompt"))[:80]


def create_app(emulator: Emulator) -> FastAPI:
    """The ASGI app serving ``emulator``."""
    app = FastAPI(title="ayo emulate", docs_url=None, redoc_url=None, openapi_url=None)

    async def json_body(request: Request) -> Any:
        raw = await request.body()
        try:
            return json.loads(raw) if raw else {}
        except ValueError as exc:
            return JSONResponse(shapes.error(400, f"1 validation error:\n  {{'type': 'json_invalid', 'msg': 'JSON decode "
                                                  f"error', 'ctx': {{'error': '{exc}'}}}}", "Bad Request", "body"), 400)

    def model_route(path: str) -> Any:
        async def handle(request: Request) -> Response:
            body = await json_body(request)
            return body if isinstance(body, Response) else await emulator.model_request(path, body, request)
        return handle

    app.add_api_route(shapes.CHAT, model_route(shapes.CHAT), methods=["POST"])
    app.add_api_route(shapes.COMPLETIONS, model_route(shapes.COMPLETIONS), methods=["POST"])

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Response:
        body = await json_body(request)
        return body if isinstance(body, Response) else await emulator.embeddings(body)

    for path in ("/tokenize", "/detokenize"):
        async def exact_post(request: Request, path: str = path) -> Response:
            body = await json_body(request)
            return body if isinstance(body, Response) else await emulator.exact_request("POST", path, body)
        app.add_api_route(path, exact_post, methods=["POST"])

    @app.get("/v1/models")
    async def models() -> Response:
        if emulator.upstream is None and emulator.served_model:
            return JSONResponse({"object": "list", "data": [{"id": emulator.served_model, "object": "model",
                                                            "owned_by": "ayo-emulate", "max_model_len": 8192}]})
        return await emulator.exact_request("GET", "/v1/models", None)

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Response:
        emulator.engine.reset_prefix_cache()
        if emulator.upstream is not None and emulator.mode == "record":
            await emulator.http().post(emulator.upstream + "/reset_prefix_cache")
        return JSONResponse({"success": True})

    @app.get("/metrics")
    async def metrics() -> Response:
        return PlainTextResponse(emulator.metrics())

    @app.get("/server_info")
    async def server_info() -> Response:  # vLLM dev mode prints its config; Ayo reads device_config
        return PlainTextResponse(f"vllm_config=emulated profile={emulator.profile.name}, device_config={emulator.profile.device}")

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> Response:
        return JSONResponse({"version": f"emulated ({emulator.profile.name})", "profile": emulator.profile.describe()})

    @app.post("/emulate/mode")
    async def set_mode(request: Request) -> Response:
        body = await json_body(request)
        mode = body.get("mode") if isinstance(body, dict) else None
        if mode not in MODES:
            return JSONResponse(shapes.error(400, f"mode must be one of {MODES}", "Bad Request", "mode"), 400)
        emulator.mode = mode
        return JSONResponse(emulator.stats())

    @app.get("/emulate/stats")
    async def stats() -> Response:
        return JSONResponse(emulator.stats())

    return app
