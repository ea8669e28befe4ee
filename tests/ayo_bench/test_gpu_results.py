"""The committed GPU measurement (``benchmarks/results/gpu-h200/``, made by the prepared GPU run on a lent
H200): a profile Ayo loads, whose provenance names a commit holding exactly the files it read, and
whose comparison is the one its constants give."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ayo_core.emulate.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "gpu-h200"
sys.path.insert(0, str(REPO / "benchmarks" / "gpu"))

import profile_gpu  # noqa: E402


def test_the_measured_profile_loads_with_every_source() -> None:
    profile = load_profile(RESULTS / "gpu-measured.json")
    assert profile.kind == "serving" and profile.llm.step_base > 0 and profile.embed.batch_s(1, 64) > 0
    assert all("NVIDIA H200" in profile.sources[f"llm.{k}"] for k in ("step_base", "per_sequence", "token_roofline_s"))
    assert "kernel time" in profile.sources["llm.step_base"]  # the CUDA-graph stand-in, not eager wall time


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs the git history the provenance names")
def test_provenance_names_a_commit_holding_the_files_it_read() -> None:
    provenance = json.loads((RESULTS / "gpu-measured.json").read_text())["provenance"]
    for path, digest in provenance["files_sha256"].items():
        committed = subprocess.run(["git", "-C", str(REPO), "show", f"{provenance['commit']}:{path}"],
                                   capture_output=True, check=True).stdout
        assert hashlib.sha256(committed).hexdigest() == digest, path


def test_comparison_is_what_the_constants_give() -> None:
    """comparison.json recomputed from the two profiles' constants (no figure edited by hand)."""
    profile = json.loads((RESULTS / "gpu-measured.json").read_text())
    measured = {k: v["value"] for k, v in profile["llm"].items()}
    comparison = json.loads((RESULTS / "comparison.json").read_text())
    for row in comparison["h100-llama2-7b"]:
        assert row["measured_s"] == pytest.approx(profile_gpu.step_s(measured, row["decoding"], row["context"],
                                                                     row["prefill"]))
