"""Record mode: a model request goes to the real vLLM server, in real time, and its answer is stored.

Upstream the request is always streamed with ``include_usage`` and ``continuous_usage_stats`` (the
same tokens, and each chunk says how many completion tokens it follows); the client gets the answer
in the form it asked for (its stream options, or one JSON body assembled as vLLM assembles it). A
client that hangs up mid-stream closes the upstream request too (vLLM aborts it), and what arrived
is stored as a prefix.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from fastapi.responses import JSONResponse, Response, StreamingResponse

from ayo_core.emulate import shapes
from ayo_core.emulate.recording import Recording, exact_key, without_delivery

if TYPE_CHECKING:
    from ayo_core.emulate.server import Emulator

log = logging.getLogger(__name__)
_DROP = ("id", "created", "usage", "system_fingerprint")


async def record_model_request(em: Emulator, path: str, body: dict[str, Any], key: str) -> Response:
    upstream_body = {**body, "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    client = em.http()
    request = client.build_request("POST", em.upstream + path, json=upstream_body)
    resp = await client.send(request, stream=True)
    if resp.status_code != 200:
        payload = json.loads(await resp.aread() or b"{}")
        await resp.aclose()
        em.store.add_exact(exact_key(path, without_delivery(body)), resp.status_code, payload)
        return JSONResponse(payload, status_code=resp.status_code)
    state = _Capture()
    if body.get("stream"):
        return StreamingResponse(_relay(em, path, body, key, resp, state), media_type="text/event-stream")
    try:
        async for _ in _events(resp, state):
            pass
    finally:
        await resp.aclose()
    rec = await _store(em, path, body, key, state)
    model = str(body.get("model") or "")
    return JSONResponse(shapes.response_body(path, rec.chunks, str(rec.finish_reason), rec.stop_reason, model,
                                             rec.prompt_tokens, state.cached, state.created_cache, rec.extras))


class _Capture:
    def __init__(self) -> None:
        self.chunks: list[list[Any]] = []
        self.prompt_tokens = 0
        self.cached = 0
        self.created_cache: int | None = None
        self.finish: str | None = None
        self.stop_reason: Any = None
        self.extras: dict[str, Any] = {}
        self.final: dict[str, Any] | None = None


async def _events(resp: Any, state: _Capture) -> Any:
    """The upstream stream's chunks (as dicts), recorded into ``state`` as they pass."""
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        chunk = json.loads(data)
        usage = chunk.get("usage") or {}
        if chunk.get("system_fingerprint"):
            state.extras["system_fingerprint"] = chunk["system_fingerprint"]
        if not chunk.get("choices"):
            state.final = chunk
            state.prompt_tokens = usage.get("prompt_tokens", state.prompt_tokens)
            details = usage.get("prompt_tokens_details") or {}
            state.cached, state.created_cache = details.get("cached_tokens") or 0, details.get("created_cache_tokens")
            yield chunk
            continue
        state.prompt_tokens = usage.get("prompt_tokens", state.prompt_tokens)
        for choice in chunk["choices"]:
            if choice.get("finish_reason") is not None:
                state.finish, state.stop_reason = choice["finish_reason"], choice.get("stop_reason")
        state.chunks.append([{k: v for k, v in chunk.items() if k not in _DROP}, int(usage.get("completion_tokens", 0))])
        yield chunk


async def _relay(em: Emulator, path: str, body: dict[str, Any], key: str, resp: Any, state: _Capture) -> Any:
    options = body.get("stream_options") or {}
    try:
        async for chunk in _events(resp, state):
            if not chunk.get("choices"):
                if options.get("include_usage"):
                    yield _sse(chunk)
                continue
            out = dict(chunk)
            if not options.get("continuous_usage_stats"):
                out.pop("usage", None)
            if state.finish is not None and not options.get("include_usage"):
                out["system_fingerprint"] = state.extras.get("system_fingerprint")
            yield _sse(out)
        yield "data: [DONE]\n\n"
    finally:
        await resp.aclose()
        await _store(em, path, body, key, state)


def _sse(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"


async def _store(em: Emulator, path: str, body: dict[str, Any], key: str, state: _Capture) -> Recording:
    rec = Recording(path=path, chunks=state.chunks, prompt_tokens=state.prompt_tokens,
                    prompt_ids=await _prompt_ids(em, path, body), finish_reason=state.finish,
                    stop_reason=state.stop_reason, extras=state.extras)
    if rec.chunks:
        em.store.add_model(key, rec)
    return rec


async def _prompt_ids(em: Emulator, path: str, body: dict[str, Any]) -> list[int]:
    """The prompt's token ids as the server renders them (its ``/tokenize``), for the prefix cache."""
    prompt = body.get("prompt")
    if path == shapes.COMPLETIONS and isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    ask: dict[str, Any] = {"model": body.get("model")}
    if path == shapes.CHAT:
        ask.update({"messages": body.get("messages"), "add_generation_prompt": True})
        for extra in ("tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message"):
            if extra in body:
                ask[extra] = body[extra]
    else:
        ask["prompt"] = prompt
    try:
        resp = await em.http().post(em.upstream + "/tokenize", json=ask)
        resp.raise_for_status()
        return list(resp.json()["tokens"])
    except Exception as exc:  # noqa: BLE001 - the answer is kept; only the prefix cache model loses detail
        log.warning("could not tokenize a recorded prompt at %s/tokenize (%s): its prefix-cache hits are not "
                    "modelled in replay", em.upstream, exc)
        return []
