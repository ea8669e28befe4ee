"""Write the GPU and hosted-API deployment profiles (``ayo_core/emulate/profiles/``) from published data.

    python benchmarks/emulate_profiles.py --vidur-checkout PATH   # a clone of github.com/microsoft/vidur

The LLM steps of ``a100-llama2-7b`` and ``h100-llama2-7b`` are fitted to Vidur's (MLSys'24, MIT licence)
per-operation GPU profiles, ``data/profiling/compute/{a100,h100}/meta-llama/Llama-2-7b-hf/mlp.csv``:
for each batch size in tokens, the medians of the linear operations of one decoder layer (layer
norms, QKV and output projections, rotary embedding, gated MLP, residual adds) times 32 layers,
plus the token embedding. The other constants cite their sources beside them. (Vidur profiles
Llama-3-8B on A100 only, so the H100 profile is Llama-2-7B's; its attention kernels' CSVs are not
in the repository's history as stored, so the KV read per context token comes from the memory
bandwidth, as stated.) The cpu-local profile is not written here: ``ayo emulate calibrate`` measures it.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import statistics
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "ayo_core" / "emulate" / "profiles"
VIDUR_CSV = "data/profiling/compute/{gpu}/meta-llama/Llama-2-7b-hf/mlp.csv"
LAYER_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
             "mlp_up_proj", "mlp_act", "mlp_down_proj", "add", "add")  # two residual adds per layer
LAYERS = 32
KV_BYTES_PER_TOKEN = 2 * LAYERS * 4096 * 2  # K and V, 32 layers, hidden 4096, fp16 (Llama-2-7B config)
WEIGHT_BYTES = 6.74e9 * 2  # Llama-2-7B, 6.74 B parameters in fp16
GPUS = {  # memory (bytes) and bandwidth (bytes/s) from NVIDIA's datasheets; vLLM defaults by GPU class
    "a100": {"memory": 80e9, "bandwidth": 2.039e12, "chunk": 2048, "max_seqs": 256,
             "sheet": "NVIDIA A100 80GB SXM datasheet: 80 GB HBM2e, 2,039 GB/s",
             "defaults": "vllm 0.32.0 vllm/engine/arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args: "
                         "A100 (and GPUs under 70 GiB) in the OpenAI API server: max_num_batched_tokens 2048, "
                         "max_num_seqs 256"},
    "h100": {"memory": 80e9, "bandwidth": 3.35e12, "chunk": 8192, "max_seqs": 1024,
             "sheet": "NVIDIA H100 SXM5 datasheet: 80 GB HBM3, 3.35 TB/s",
             "defaults": "vllm 0.32.0 vllm/engine/arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args: "
                         "H100/H200 class (>= 70 GiB, not A100) in the OpenAI API server: max_num_batched_tokens "
                         "8192, max_num_seqs 1024"},
}
STEP_CPU_S = 0.001
STEP_CPU_SOURCE = ("estimate: per-step sampling, scheduling and detokenization left on the critical path after "
                   "vLLM's asynchronous output processing (vLLM blog 2024-09-05 'vLLM v0.6.0: 2.7x Throughput "
                   "Improvement and 5x Latency Reduction' reports these CPU parts dominated Llama-3-8B/H100 steps "
                   "before they were overlapped); not measured")
EMBED = {  # all-MiniLM-L6-v2 on a GPU of its own
    "fixed_s": {"value": 0.002, "source": "estimate: one forward pass of a 6-layer encoder at batch 1 is launch-bound "
                                          "(~70 kernels at ~10-30 us each) plus tokenization; not measured"},
    "per_text_s": {"value": 1 / 14200, "source": "sbert.net Pretrained Models table: all-MiniLM-L6-v2 encodes "
                                                 "14,200 sentences/s on a V100 GPU (an A100/H100 is faster: "
                                                 "conservative)"},
    "per_token_s": {"value": 0.0, "source": "the sbert.net figure is per sentence of its benchmark; no per-token "
                                            "term is published, so none is added"},
    "max_batch": {"value": 256, "source": "estimate: text-embeddings-inference's default max_batch_tokens 16384 "
                                          "holds 256 texts of 64 tokens; not measured"},
}
HOSTED = {
    "ttft_s": {"value": 0.645, "source": "jonathanwrede.de/en/blog/i-monitored-6-llm-apis-for-7-days: GPT-4o-mini "
                                         "through OpenRouter, TTFT p50 645 ms over 10,080 probes in 7 days"},
    "tpot_s": {"value": 1 / 105.3, "source": "same measurement: 105.3 output tokens/s for GPT-4o-mini"},
    "requests_per_minute": {"value": 500, "source": "OpenAI rate limits, usage tier 1, gpt-4o-mini: 500 RPM"},
}


def layer_times_ms(path: Path) -> dict[int, float]:
    """Batch size in tokens -> ms of one step's linear operations (single GPU rows)."""
    out: dict[int, float] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["num_tensor_parallel_workers"] != "1":
                continue
            layer = sum(float(row[f"time_stats.{op}.median"]) for op in LAYER_OPS)
            out[int(row["num_tokens"])] = layer * LAYERS + float(row["time_stats.emb.median"])
    return out


def fit_llm(times: dict[int, float], gpu: str, source: str) -> dict[str, dict]:
    spec = GPUS[gpu]
    small = sorted(t for t in times if t <= 16)
    base_ms = statistics.median(times[t] for t in small)
    seq_slope = (statistics.median(times[t] for t in times if 48 <= t <= 64) - base_ms) / 55
    roofline_ms = statistics.median(times[t] / t for t in times if t >= 1024)
    kv = spec["memory"] * 0.9 - WEIGHT_BYTES - 2e9
    fit = f"fitted by benchmarks/emulate_profiles.py to {source}"
    return {
        "fixed": {"value": 0.0, "source": "the emulator's own HTTP handling and tokenization run in real time on the "
                                          "client's machine and stand in for the server's"},
        "step_base": {"value": base_ms / 1000 + STEP_CPU_S,
                      "source": f"{fit}: median over 1-16 tokens of 32 layers' linear operations + embedding "
                                f"({base_ms:.3f} ms), plus {STEP_CPU_S * 1000:.1f} ms per step of CPU work ({STEP_CPU_SOURCE})"},
        "per_sequence": {"value": max(0.0, seq_slope) / 1000,
                         "source": f"{fit}: growth of the step from 1-16 to 48-64 tokens, per token"},
        "token_roofline_s": {"value": roofline_ms / 1000,
                             "source": f"{fit}: median ms per token over batches of 1024 tokens and more (compute-bound)"},
        "per_context_token": {"value": KV_BYTES_PER_TOKEN / spec["bandwidth"],
                              "source": f"decode attention reads each context token's K and V once: {KV_BYTES_PER_TOKEN} "
                                        f"bytes (Llama-2-7B: 32 layers x 4096 x 2 x fp16) at the datasheet bandwidth "
                                        f"({spec['sheet']}); Vidur's attention CSVs are not in the stored repository"},
        "per_prefill_token": {"value": 0.0, "source": "prefill attention FLOPs are under 3 % of the linear operations' "
                                                      "below 2k tokens (4 n^2 d per layer against 24 n d^2); the "
                                                      "linear part is in token_roofline_s"},
        "prefill_chunk": {"value": spec["chunk"], "source": spec["defaults"]},
        "max_seqs": {"value": spec["max_seqs"], "source": spec["defaults"]},
        "kv_tokens": {"value": int(kv // KV_BYTES_PER_TOKEN),
                      "source": f"({spec['sheet'].split(':')[1].split(',')[0].strip()} x vLLM's default "
                                f"gpu_memory_utilization 0.9 - 13.5 GB fp16 weights - 2 GB activations) / "
                                f"{KV_BYTES_PER_TOKEN} bytes per token"},
    }


def vidur_source(checkout: Path, rel: str) -> str:
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    digest = hashlib.sha256((checkout / rel).read_bytes()).hexdigest()[:16]
    return f"github.com/microsoft/vidur@{commit[:12]} {rel} (sha256 {digest}, MIT licence)"


def write(name: str, profile: dict) -> Path:
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(profile, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vidur-checkout", type=Path, required=True, help="a clone of github.com/microsoft/vidur")
    args = parser.parse_args(argv)
    block = {"value": 16, "source": "vLLM's default KV block size on CUDA (CacheConfig.block_size 16)"}
    for gpu in ("a100", "h100"):
        rel = VIDUR_CSV.format(gpu=gpu)
        source = vidur_source(args.vidur_checkout, rel)
        llm = fit_llm(layer_times_ms(args.vidur_checkout / rel), gpu, source)
        profile = {"name": f"{gpu}-llama2-7b", "kind": "serving", "device": "cuda",
                   "description": f"vLLM serving Llama-2-7B (fp16) on one {gpu.upper()} 80GB; all-MiniLM-L6-v2 "
                                  f"embeddings on a GPU of their own (the paper's class of setup)",
                   "llm": llm, "embed": EMBED, "prefix_block": block}
        print(f"wrote {write(profile['name'], profile)}")
    hosted = {"name": "hosted-api", "kind": "hosted", "device": "cuda",
              "description": "a hosted LLM API (GPT-4o-mini class): latency independent of load, a rate limit; "
                             "embeddings on a self-hosted MiniLM GPU server as in the GPU profiles",
              "hosted": HOSTED, "embed": EMBED,
              "prefix_block": {"value": 16, "source": "unused by the hosted model (no prefix cache is modelled)"}}
    print(f"wrote {write('hosted-api', hosted)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
