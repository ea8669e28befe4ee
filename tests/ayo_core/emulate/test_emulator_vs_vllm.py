"""The emulator against the real vLLM server: the same shapes, chunks, usage and errors; replay exact
token for token (a shorter request gets the recorded prefix); a miss named; embeddings replayed."""

from __future__ import annotations

import time

import httpx
import pytest

from ayo_core.emulate.process import EmulatorProcess
from ayo_core.models import LLM_NAME, embedding_model_path

pytestmark = [pytest.mark.llm, pytest.mark.slow]
CHAT = {"model": LLM_NAME, "messages": [{"role": "user", "content": "Name three colours of the rainbow."}],
        "max_tokens": 24, "temperature": 0}
COMPLETION = {"model": LLM_NAME, "prompt": "The capital of France is", "max_tokens": 12, "temperature": 0}


def sse(client: httpx.Client, url: str, body: dict) -> list[dict]:
    import json

    out = []
    with client.stream("POST", url, json={**body, "stream": True}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                out.append(json.loads(line[5:]))
    return out


def text_of(chunks: list[dict]) -> str:
    return "".join((c["choices"][0].get("delta") or {}).get("content") or c["choices"][0].get("text") or ""
                   for c in chunks if c["choices"])


def shape(obj):
    """The keys of a response, recursively (values differ: ids, times)."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shape(v) for v in obj[:1]]
    return None


@pytest.fixture(scope="module")
def emulator(llm_url, tmp_path_factory):
    store = tmp_path_factory.mktemp("emulate") / "answers.jsonl"
    with EmulatorProcess("a100-llama2-7b", store, mode="record", upstream=llm_url,
                         embed_model=str(embedding_model_path()), served_model=LLM_NAME) as em:
        em.store = store
        yield em


def test_record_mode_answers_as_vllm_does(llm_url, emulator):
    real_root, em_root = llm_url.removesuffix("/v1"), emulator.root_url
    with httpx.Client(timeout=120) as c:
        for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
            real, emu = c.post(real_root + path, json=body).json(), c.post(em_root + path, json=body).json()
            assert shape(emu) == shape(real), path
            assert emu["choices"][0] == {**real["choices"][0]}, path  # same text, finish and stop reasons
            assert emu["usage"]["completion_tokens"] == real["usage"]["completion_tokens"]
            assert emu["usage"]["prompt_tokens"] == real["usage"]["prompt_tokens"]
            for opts in ({}, {"stream_options": {"include_usage": True}},
                         {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}):
                real_chunks = sse(c, real_root + path, {**body, **opts})
                emu_chunks = sse(c, em_root + path, {**body, **opts})
                assert [shape(x) for x in emu_chunks] == [shape(x) for x in real_chunks], (path, opts)
                assert [x["choices"] for x in emu_chunks] == [x["choices"] for x in real_chunks], (path, opts)


def test_errors_are_vllms(llm_url, emulator):
    real_root, em_root = llm_url.removesuffix("/v1"), emulator.root_url
    long_prompt = {**COMPLETION, "prompt": "word " * 9000}
    with httpx.Client(timeout=120) as c:
        for body in ({**CHAT, "model": "no-such-model"}, {**CHAT, "messages": "not a list"}, long_prompt):
            path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
            real, emu = c.post(real_root + path, json=body), c.post(em_root + path, json=body)
            assert emu.status_code == real.status_code, body
            assert emu.json()["error"]["type"] == real.json()["error"]["type"]
        bad = c.post(em_root + "/v1/chat/completions", content=b"{bad", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and "JSON" in bad.json()["error"]["message"]


def test_replay_is_exact_token_for_token_and_cut_to_max_tokens(llm_url, emulator):
    real_root, em_root = llm_url.removesuffix("/v1"), emulator.root_url
    body = {**CHAT, "max_tokens": 40}
    with httpx.Client(timeout=120) as c:
        real = sse(c, real_root + "/v1/chat/completions", body)
        sse(c, em_root + "/v1/chat/completions", body)  # recorded
        emulator.set_mode("replay")
        try:
            before = emulator.stats()
            replayed = sse(c, em_root + "/v1/chat/completions", body)
            assert [x["choices"] for x in replayed] == [x["choices"] for x in real]
            whole = c.post(em_root + "/v1/chat/completions", json=body).json()
            assert whole["choices"][0]["message"]["content"] == text_of(real)
            short = c.post(em_root + "/v1/chat/completions", json={**body, "max_tokens": 7}).json()
            real_short = c.post(real_root + "/v1/chat/completions", json={**body, "max_tokens": 7}).json()
            assert short["choices"][0]["message"]["content"] == real_short["choices"][0]["message"]["content"]
            assert short["choices"][0]["finish_reason"] == "length"
            after = emulator.stats()
            assert after["replayed"] - before["replayed"] == 3 and after["misses_proxied"] == before["misses_proxied"]
        finally:
            emulator.set_mode("record")


def test_replay_takes_the_profiles_time(emulator):
    from ayo_core.emulate.profile import load_profile

    body = {**CHAT, "max_tokens": 24}
    with httpx.Client(timeout=120) as c:
        usage = c.post(emulator.root_url + "/v1/chat/completions", json=body).json()["usage"]
        emulator.set_mode("replay")
        try:
            c.post(emulator.root_url + "/reset_prefix_cache")
            start = time.perf_counter()
            c.post(emulator.root_url + "/v1/chat/completions", json=body).raise_for_status()
            took = time.perf_counter() - start
        finally:
            emulator.set_mode("record")
    alone = load_profile("a100-llama2-7b").llm_alone_s(usage["prompt_tokens"], 0, usage["completion_tokens"])
    assert 0.95 * alone <= took < alone + 2.0  # never faster than the model; HTTP on a shared CPU adds a little


def test_a_miss_without_upstream_names_the_request(emulator):
    with httpx.Client(timeout=60) as c:
        c.post(emulator.root_url + "/v1/chat/completions", json=CHAT).raise_for_status()  # recorded
    with EmulatorProcess("a100-llama2-7b", emulator.store, mode="replay", served_model=LLM_NAME) as offline, \
            httpx.Client(timeout=60) as c:
        hit = c.post(offline.root_url + "/v1/chat/completions", json=CHAT)
        assert hit.status_code == 200
        miss = c.post(offline.root_url + "/v1/chat/completions",
                      json={**CHAT, "messages": [{"role": "user", "content": "Never recorded question?"}]})
        assert miss.status_code == 400
        message = miss.json()["error"]["message"]
        assert "no recording" in message and "Never recorded question?" in message and "record" in message


def test_embeddings_recorded_then_replayed(emulator):
    body = {"model": "all-MiniLM-L6-v2", "input": ["a first text", "a second one"]}
    with httpx.Client(timeout=120) as c:
        recorded = c.post(emulator.root_url + "/v1/embeddings", json=body).json()
        emulator.set_mode("replay")
        try:
            replayed = c.post(emulator.root_url + "/v1/embeddings", json=body).json()
            b64 = c.post(emulator.root_url + "/v1/embeddings", json={**body, "encoding_format": "base64"}).json()
        finally:
            emulator.set_mode("record")
    assert [d["embedding"] for d in replayed["data"]] == [d["embedding"] for d in recorded["data"]]
    assert len(recorded["data"][0]["embedding"]) == 384 and isinstance(b64["data"][0]["embedding"], str)


def test_capabilities_as_ayo_reads_them(emulator):
    import asyncio

    from ayo_core.engines.capabilities import server_capabilities

    caps = asyncio.run(server_capabilities(emulator.base_url))
    assert caps.prefix_caching is True and caps.block_size == 16 and caps.device == "cuda"
