"""Session-wide test setup: offline switches and one real vLLM server per session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Set before any test imports the libraries: no hub, no telemetry, Ray stays in tmp.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def llm_url() -> Iterator[str]:
    """Base URL (``.../v1``) of a vLLM server: ``AYO_LLM_URL`` if set, else one started for the session."""
    existing = os.environ.get("AYO_LLM_URL")
    if existing:
        yield existing
        return
    from ayo_core.engines.llm_server import serve_llm

    # A busy CI machine can take minutes to start vLLM: be generous, it fails with the log tail.
    with serve_llm(dtype="float32", startup_timeout=900) as url:
        os.environ["AYO_LLM_URL"] = url
        try:
            yield url
        finally:
            os.environ.pop("AYO_LLM_URL", None)


@pytest.fixture(scope="session")
def tools_llm_url(llm_url: str) -> str:
    """A server that speaks tool calls: ``AYO_TOOLS_LLM_URL`` if set, else the session's server (a
    server Ayo starts for the default model has tool calling on; an ``AYO_LLM_URL`` of yours may not)."""
    return os.environ.get("AYO_TOOLS_LLM_URL") or llm_url


@pytest.fixture(scope="session")
def transformers_llm_url() -> Iterator[str]:
    """Base URL (``.../v1``) of ``transformers serve --continuous-batching`` with the prepared SmolLM2
    (float32, served as ``SmolLM2-135M-Instruct``), started for the session: a second server
    implementation, one without priority, /metrics, /tokenize, prefix-cache reset or ``[DONE]``."""
    from ayo_core.models import llm_model_path
    from tests.transformers_serve import ServeUnavailable, serve_transformers

    try:
        with serve_transformers(llm_model_path("float32")) as url:
            yield url
    except ServeUnavailable as exc:
        pytest.skip(f"transformers serve cannot start here: {exc}")


# ---- the opt-in long suite ---------------------------------------------------------------
# Tests marked ``long`` (128-token answers on the real server, five-turn conversations, and the wider
# variants of a test whose narrower one stays: five questions where three run by default, every
# mode-by-style pair where each mode and style runs once) are left out of the default run, which CI
# bounds at 70 minutes; ``make test-long`` (pytest --long) runs them
# too. Of the 256-token tests (marked ``slow``), one streamed pattern per adapter is in the default run.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="also run the tests marked long (128-token answers)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--long"):
        return
    long = [item for item in items if item.get_closest_marker("long") is not None]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if item.get_closest_marker("long") is None]
