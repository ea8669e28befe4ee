"""Measure a GPU's serving-step costs with a real-size model and write them as an Ayo deployment profile.

    python benchmarks/gpu/profile_gpu.py --out OUT_DIR                       # on the GPU machine
    python benchmarks/gpu/profile_gpu.py --out /tmp/p --model tiny --device cpu   # the dry run here

For the prepared GPU run (docs/emulation.md, "A prepared GPU run"): the machine has torch and
transformers but no vLLM and no network, so the model is Llama-2-7B's architecture built from its
config with uninitialised (random) weights, in float16 — the forward passes cost what the real
model's do, the values are meaningless, and no weights need to come in. It measures, each point the
median of several timed passes after a warm-up (``torch.cuda.synchronize`` around each):

* the step's linear work against the tokens in it: a forward pass of T tokens without a cache
  (T = 16 .. 4096) -> the weight-bound floor and the compute-bound ms per token;
* a decode step against batch and context: B sequences (B = 1 .. 64) holding C tokens of KV each
  (C = 256, 1024), one token each -> per sequence and per context token.

It writes ``gpu-measured.json`` (Ayo's profile format, every constant's source naming the
measurement, the GPU and the date; the embedding section is the a100 profile's, cited) and
``comparison.json`` (the measured step costs beside the shipped GPU profiles' at the same points,
when those profiles are next to this script's checkout). Standalone: only torch and transformers.
It stops measuring at ``--budget`` seconds and writes what it has.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}
TINY = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 4096}
TOKENS = (16, 64, 256, 512, 1024, 2048, 4096)
BATCHES = (1, 8, 32, 64)
CONTEXTS = (256, 1024)
PROFILES = Path(__file__).resolve().parents[2] / "ayo_core" / "emulate" / "profiles"


def build_model(model: str, device: str, dtype: str) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    try:  # transformers 5 moved it
        from transformers.initialization import no_init_weights
    except ImportError:
        from transformers.modeling_utils import no_init_weights

    config = LlamaConfig(**(LLAMA2_7B if model == "llama2-7b" else TINY))
    torch_dtype = getattr(torch, dtype)
    with no_init_weights(), torch.device(device):
        net = LlamaForCausalLM(config).to(torch_dtype)
    return net.eval()


def timed(fn: Any, device: str, repeats: int) -> float:
    import torch

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    fn()
    sync()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def measure(net: Any, device: str, repeats: int, budget_s: float) -> dict[str, Any]:
    import torch

    t0, vocab = time.perf_counter(), net.config.vocab_size
    linear: dict[int, float] = {}
    decode: dict[str, float] = {}
    with torch.inference_mode():
        for t in TOKENS:
            if time.perf_counter() - t0 > budget_s:
                break
            ids = torch.randint(0, vocab, (1, t), device=device)
            linear[t] = timed(lambda ids=ids: net(input_ids=ids, use_cache=False), device, repeats)
        for c in CONTEXTS:
            for b in BATCHES:
                if time.perf_counter() - t0 > budget_s:
                    break
                decode[f"{b}x{c}"] = _decode_step(net, device, b, c, repeats)
    return {"linear_s": linear, "decode_s": decode, "seconds": time.perf_counter() - t0}


def _decode_step(net: Any, device: str, batch: int, context: int, repeats: int) -> float:
    import torch

    ids = torch.randint(0, net.config.vocab_size, (batch, context), device=device)
    past = net(input_ids=ids, use_cache=True).past_key_values
    step = torch.randint(0, net.config.vocab_size, (batch, 1), device=device)
    state = {"past": past}

    def one() -> None:  # each step appends one token of KV: context grows by `repeats`, negligible
        state["past"] = net(input_ids=step, past_key_values=state["past"], use_cache=True).past_key_values

    seconds = timed(one, device, repeats)
    state.clear()  # the cache's memory back before the next point
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return seconds


def fit(m: dict[str, Any], gpu: str, model: str) -> dict[str, Any]:
    lin, dec = m["linear_s"], m["decode_s"]
    how = f"measured by benchmarks/gpu/profile_gpu.py on {gpu}, {model} architecture (random weights), " \
          f"{datetime.date.today().isoformat()}"
    floor = statistics.median(v for t, v in lin.items() if t <= 64)
    roof = statistics.median(v / t for t, v in lin.items() if t >= 1024) if any(t >= 1024 for t in lin) else 0.0
    small = {int(k.split("x")[0]): v for k, v in dec.items() if k.endswith(f"x{CONTEXTS[0]}")}
    big = {int(k.split("x")[0]): v for k, v in dec.items() if k.endswith(f"x{CONTEXTS[-1]}")}
    base = small.get(1, floor)
    per_seq = max(0.0, (small[max(small)] - base) / max(1, max(small) - 1)) if len(small) > 1 else 0.0
    common = sorted(set(small) & set(big))
    per_ctx = (statistics.median(max(0.0, big[b] - small[b]) / (b * (CONTEXTS[-1] - CONTEXTS[0])) for b in common)
               if common else 0.0)
    pts = lambda d: ", ".join(f"{k}: {v * 1000:.2f} ms" for k, v in d.items())  # noqa: E731
    shipped = json.loads((PROFILES / "a100-llama2-7b.json").read_text()) if (PROFILES / "a100-llama2-7b.json").exists() else {}
    llm = {
        "fixed": {"value": 0.0, "source": "the emulator's own HTTP handling stands in for the server's (as the shipped GPU profiles)"},
        "step_base": {"value": base, "source": f"{how}: decode step of 1 sequence at {CONTEXTS[0]} tokens of context "
                                               f"({pts(small)})"},
        "per_sequence": {"value": per_seq, "source": f"{how}: decode step growth from 1 to {max(small or [1])} sequences"},
        "per_context_token": {"value": per_ctx, "source": f"{how}: decode step growth from {CONTEXTS[0]} to "
                                                          f"{CONTEXTS[-1]} tokens per sequence ({pts(big)})"},
        "per_prefill_token": {"value": 0.0, "source": "prefill's linear work is in token_roofline_s (as the shipped GPU profiles)"},
        "token_roofline_s": {"value": roof, "source": f"{how}: forward passes without a cache, median s per token at "
                                                      f"1024+ tokens ({pts(lin)})"},
    }
    for key in ("prefill_chunk", "max_seqs", "kv_tokens"):
        if key in shipped.get("llm", {}):
            llm[key] = {"value": shipped["llm"][key]["value"], "source": "as the a100-llama2-7b profile: "
                                                                         + shipped["llm"][key]["source"]}
    embed = {k: {"value": v["value"], "source": "as the a100-llama2-7b profile: " + v["source"]}
             for k, v in shipped.get("embed", {}).items()} or {
        "fixed_s": {"value": 0.002, "source": "estimate"}, "per_text_s": {"value": 1 / 14200, "source": "sbert.net"},
        "per_token_s": {"value": 0.0, "source": "none published"}, "max_batch": {"value": 256, "source": "estimate"}}
    return {"name": "gpu-measured", "kind": "serving", "device": "cuda",
            "description": f"step costs measured on {gpu} with a {model}-shaped model (random weights)",
            "llm": llm, "embed": embed, "prefix_block": {"value": 16, "source": "vLLM's default KV block size on CUDA"},
            "measurements": m}


def step_s(f: dict[str, float], decoding: int, context: int, prefill: int) -> float:
    """``ayo_core.emulate.step_engine.StepModel.step``, restated: the GPU machine may lack Ayo's dependencies."""
    weights = max(f["step_base"] + f["per_sequence"] * max(0, decoding - 1),
                  f.get("token_roofline_s", 0.0) * (decoding + prefill))
    return weights + f["per_context_token"] * context + f["per_prefill_token"] * prefill


def compare(profile: dict[str, Any]) -> dict[str, Any]:
    """Measured step costs beside the shipped GPU profiles' at the same points (seconds)."""
    measured = {k: v["value"] for k, v in profile["llm"].items()}
    points = [(1, 256, 0), (8, 8 * 256, 0), (32, 32 * 1024, 0), (0, 0, 512), (0, 0, 2048)]
    out: dict[str, Any] = {}
    for name in ("a100-llama2-7b", "h100-llama2-7b"):
        if not (PROFILES / f"{name}.json").exists():
            continue
        shipped = {k: v["value"] for k, v in json.loads((PROFILES / f"{name}.json").read_text())["llm"].items()}
        out[name] = [{"decoding": d, "context": c, "prefill": p, "measured_s": step_s(measured, d, c, p),
                      "profile_s": step_s(shipped, d, c, p)} for d, c, p in points]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", choices=["llama2-7b", "tiny"], default="llama2-7b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=360.0, help="seconds of measuring before it writes what it has")
    args = parser.parse_args(argv)
    import torch

    gpu = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else f"CPU ({args.device}, dry run)"
    start = time.perf_counter()
    net = build_model(args.model, args.device, args.dtype)
    built = time.perf_counter() - start
    m = measure(net, args.device, args.repeats, args.budget)
    m["build_s"] = built
    profile = fit(m, gpu, args.model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-measured.json").write_text(json.dumps(profile, indent=1) + "\n")
    (out / "comparison.json").write_text(json.dumps(compare(profile), indent=1) + "\n")
    print(f"built in {built:.1f} s, measured in {m['seconds']:.1f} s on {gpu}; wrote {out}/gpu-measured.json, comparison.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
