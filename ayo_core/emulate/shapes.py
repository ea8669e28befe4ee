"""vLLM's (0.32) OpenAI-compatible response and chunk shapes, filled from a recording.

Streamed chunks are the recorded ones, re-stamped (``id``, ``created``) and given the ``usage``
the client asked for; a non-streamed answer is assembled from the same chunks the way vLLM
assembles its own (the message's content, tool calls joined from their deltas). The shapes were
read off the real server (``tests/ayo_core/emulate/test_emulator_vs_vllm.py`` compares them).
"""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def new_id(path: str) -> str:
    return ("chatcmpl-" if path == CHAT else "cmpl-") + uuid.uuid4().hex[:16]


def usage(path: str, prompt: int, completion: int, cached: int | None = None, created: int | None = None,
          final: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                           "completion_tokens": completion}
    if final:
        details: dict[str, Any] = {"cached_tokens": cached or 0}
        if path == CHAT:
            details["created_cache_tokens"] = created
        out["prompt_tokens_details"] = details
    elif path == CHAT:
        out["completion_tokens_details"] = None
    return out


def stream_chunks(path: str, chunks: list[list[Any]], finish: str, stop_reason: Any, options: dict[str, Any],
                  prompt_tokens: int, extras: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """``(tokens before it may be sent, chunk)`` for each chunk the client gets, the usage chunk last
    (its tokens are filled in by :func:`final_usage_chunk` when the answer ends)."""
    ident, created = new_id(path), int(time.time())
    continuous = bool(options.get("continuous_usage_stats"))
    out: list[tuple[int, dict[str, Any]]] = []
    for n, (raw, tokens) in enumerate(chunks):
        chunk = {"id": ident, "object": raw.get("object"), "created": created, "model": raw.get("model"),
                 **copy.deepcopy(raw)}  # vLLM's key order: id, object, created, model, choices...
        if n == len(chunks) - 1:
            for choice in chunk.get("choices", []):
                choice["finish_reason"] = finish
                choice["stop_reason"] = stop_reason
            if not options.get("include_usage"):
                chunk["system_fingerprint"] = extras.get("system_fingerprint")
        else:
            for choice in chunk.get("choices", []):
                if choice.get("finish_reason") is not None:
                    choice["finish_reason"] = None
        if continuous:
            chunk["usage"] = usage(path, prompt_tokens, tokens)
        out.append((tokens, chunk))
    return out


def final_usage_chunk(path: str, model: str, ident: str, prompt: int, completion: int, cached: int,
                      created_cache: int | None, extras: dict[str, Any]) -> dict[str, Any]:
    obj = "chat.completion.chunk" if path == CHAT else "text_completion"
    return {"id": ident, "object": obj, "created": int(time.time()), "model": model, "choices": [],
            "usage": usage(path, prompt, completion, cached, created_cache, final=True),
            "system_fingerprint": extras.get("system_fingerprint")}


def response_body(path: str, chunks: list[list[Any]], finish: str, stop_reason: Any, model: str,
                  prompt_tokens: int, cached: int, created_cache: int | None, extras: dict[str, Any]) -> dict[str, Any]:
    """The non-streamed answer vLLM gives for these chunks."""
    completion = int(chunks[-1][1]) if chunks else 0
    tail = {"finish_reason": finish, "stop_reason": stop_reason, "token_ids": None}
    if path == CHAT:
        choice: dict[str, Any] = {"index": 0, "message": _message(chunks), "logprobs": None, **tail,
                                  "routed_experts": None}
    else:
        text = "".join((c[0]["choices"] or [{}])[0].get("text") or "" for c in chunks)
        choice = {"index": 0, "text": text, "logprobs": None, **tail, "prompt_logprobs": None,
                  "prompt_token_ids": None, "routed_experts": None}
    body: dict[str, Any] = {
        "id": new_id(path), "object": "chat.completion" if path == CHAT else "text_completion",
        "created": int(time.time()), "model": model, "choices": [choice], "service_tier": None,
        "system_fingerprint": extras.get("system_fingerprint"),
        "usage": {**usage(path, prompt_tokens, completion, cached, created_cache, final=True),
                  "completion_tokens_details": None},
    }
    body["usage"]["prompt_tokens_details"].setdefault("created_cache_tokens", created_cache)
    body["usage"]["prompt_tokens_details"]["multimodal_tokens"] = None
    if path == CHAT:
        body.update({"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None})
    body.update({"kv_transfer_params": None, "ec_transfer_params": None, "metrics": None})
    return body


def _message(chunks: list[list[Any]]) -> dict[str, Any]:
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for raw, _ in chunks:
        for choice in raw.get("choices", []):
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call.get("index", 0), {"id": None, "type": "function",
                                                               "function": {"name": "", "arguments": ""}})
                slot["id"] = call.get("id") or slot["id"]
                fn = call.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) if content or not calls else None,
                               "refusal": None, "annotations": None, "audio": None, "function_call": None}
    if calls:
        message["tool_calls"] = [calls[k] for k in sorted(calls)]
    message["reasoning"] = None
    return message


def error(status: int, message: str, kind: str, param: str | None = None) -> dict[str, Any]:
    """vLLM's error body."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}
