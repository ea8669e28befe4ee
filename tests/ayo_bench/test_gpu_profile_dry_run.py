"""The prepared GPU run's profiling script, dry-run on CPU with a tiny Llama: it writes a profile Ayo loads
(every constant with a source) and a comparison with the shipped GPU profiles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ayo_core.emulate.profile import load_profile

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_dry_run_writes_a_loadable_profile(tmp_path):
    script = REPO / "benchmarks" / "gpu" / "profile_gpu.py"
    done = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--model", "tiny", "--device", "cpu",
                           "--dtype", "float32", "--repeats", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    profile = load_profile(tmp_path / "gpu-measured.json")
    assert profile.kind == "serving" and profile.llm.step_base > 0
    assert "profile_gpu.py" in profile.sources["llm.step_base"] and "CPU" in profile.sources["llm.step_base"]
    assert "profile_gpu.py" in profile.sources["embed.per_token_s"] and profile.embed.max_batch == 256
    assert profile.embed.batch_s(32, 32 * 64) > profile.embed.batch_s(1, 64) > 0
    comparison = json.loads((tmp_path / "comparison.json").read_text())
    assert set(comparison) == {"a100-llama2-7b", "h100-llama2-7b", "a100-llama2-7b-embed", "h100-llama2-7b-embed"}
    assert all(row["measured_s"] > 0 and row["profile_s"] > 0 for row in comparison["a100-llama2-7b"])
    assert all(row["measured_s"] > 0 and row["profile_s"] > 0 for row in comparison["h100-llama2-7b-embed"])
