"""Deployment profiles: every shipped one loads, every constant names its source, bad files say why."""

from __future__ import annotations

import json

import pytest

from ayo_core.emulate.profile import PROFILES_DIR, ProfileError, list_profiles, load_profile


def test_shipped_profiles_load_and_every_constant_has_a_source():
    names = list_profiles()
    assert {"a100-llama2-7b", "h100-llama2-7b", "hosted-api"} <= set(names)
    for name in names:
        p = load_profile(name)
        raw = json.loads((PROFILES_DIR / f"{name}.json").read_text())
        sections = [s for s in ("llm", "embed", "hosted") if s in raw]
        expected = {f"{s}.{k}" for s in sections for k in raw[s]} | {"prefix_block"}
        assert set(p.sources) == expected and all(len(v) > 20 for v in p.sources.values()), name
        assert len(p.content_hash) == 64


def test_gpu_profiles_cite_vidur_and_batch_nearly_for_free():
    for name in ("a100-llama2-7b", "h100-llama2-7b"):
        p = load_profile(name)
        assert "microsoft/vidur" in p.sources["llm.step_base"] and "mlp.csv" in p.sources["llm.step_base"]
        assert p.device == "cuda"
        one, eight = p.llm.step(1, 1000, 0), p.llm.step(8, 8000, 0)
        assert eight < 1.5 * one  # a decode step of 8 sequences costs little more than one
    assert load_profile("h100-llama2-7b").llm_alone_s(500, 0, 64) < load_profile("a100-llama2-7b").llm_alone_s(500, 0, 64)


def test_hosted_profile_is_load_independent():
    p = load_profile("hosted-api")
    assert p.kind == "hosted" and p.hosted is not None
    assert p.llm_alone_s(100, 0, 11) == pytest.approx(p.hosted.ttft_s + 10 * p.hosted.tpot_s)


def test_a_constant_without_a_source_is_refused(tmp_path):
    bad = tmp_path / "mine.json"
    bad.write_text(json.dumps({"kind": "serving", "llm": {"step_base": {"value": 0.01}},
                               "embed": {"fixed_s": {"value": 0.0, "source": "x"}, "per_text_s": {"value": 0.0, "source": "x"},
                                         "per_token_s": {"value": 0.0, "source": "x"}, "max_batch": {"value": 8, "source": "x"}},
                               "prefix_block": {"value": 16, "source": "x"}}))
    with pytest.raises(ProfileError, match=r"mine.json: llm.step_base must be .*names its source"):
        load_profile(bad)


def test_an_unknown_profile_lists_the_shipped_ones():
    with pytest.raises(ProfileError, match="a100-llama2-7b"):
        load_profile("tpu-v9")
