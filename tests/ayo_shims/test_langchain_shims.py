"""The LangChain / openai touchpoints: they verify on the installed versions, each shim does what the
adapter needs, a missing internal fails ``ayo_langchain.optimize()`` loudly, and no adapter code
reaches a framework internal except through ``ayo_shims``."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

import pytest

from ayo_shims import langchain as lc
from ayo_shims import openai_sdk
from ayo_shims import touchpoints as tp

REPO = Path(__file__).resolve().parents[2]
ADAPTER = REPO / "ayo_langchain"


# ---- the register --------------------------------------------------------------------------------


def test_every_declared_touchpoint_verifies_on_the_installed_versions() -> None:
    declared = [t for fw in lc.FRAMEWORKS for t in tp.touchpoints(fw)]
    names = {t.name for t in declared}
    for wanted in (lc.BINDING_MERGE_CONFIGS, lc.RETRIEVER_LS_PARAMS, lc.RUNNABLE_CALL_WITH_CONFIG,
                   lc.RUNNABLE_ACALL_WITH_CONFIG, lc.CHAT_DEFAULT_PARAMS, lc.LLM_DEFAULT_PARAMS,
                   lc.CHAT_REQUEST_PAYLOAD, lc.CHAT_ASYNC_CLIENT, lc.LLM_ASYNC_CLIENT, lc.GENERIC_ORIGIN,
                   openai_sdk.RESOURCE_CLIENT, openai_sdk.STATUS_ERROR):
        assert wanted.name in names
    for t in declared:
        t.verify()  # the check itself, not the once-per-process cache
        assert t.installed_version() != "not installed", t.name
        assert t.checked and t.why, t.name


def test_verify_costs_nothing_after_the_first_call() -> None:
    lc.verify_all()
    t0 = time.perf_counter()
    for _ in range(1000):
        lc.verify_all()
    assert (time.perf_counter() - t0) / 1000 < 1e-3


def test_shim_modules_import_no_ayo_package() -> None:
    for path in (REPO / "shims" / "ayo_shims" / "langchain.py", REPO / "shims" / "ayo_shims" / "openai_sdk.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for mod in mods:
                assert not mod.startswith(("ayo_core", "ayo_langchain", "ayo_llamaindex")), f"{path.name}: {mod}"


# ---- each shim does what the adapter uses it for -----------------------------------------------------


def _chat_model(**kwargs: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", **kwargs)


def test_langchain_core_shims() -> None:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda, RunnableParallel

    class FixedRetriever(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list:
            return [Document(page_content=query)]

    assert lc.retriever_ls_params(FixedRetriever()) == {"ls_retriever_name": "fixed"}
    binding = RunnableLambda(lambda x: x).with_config(tags=["bound"], run_name="mine")
    merged = lc.binding_config(binding, {"tags": ["call"]})
    assert set(merged["tags"]) == {"bound", "call"} and merged["run_name"] == "mine"
    lam = RunnableLambda(lambda x: x + 1)
    assert lc.call_with_config(lam, lambda v, run_manager, config: v * 2, 3, {}) == 6
    assert lc.generic_origin(RunnableParallel[dict]) is RunnableParallel
    assert lc.generic_origin(RunnableLambda) is RunnableLambda


async def test_acall_with_config_runs_the_body_under_the_runnables_run() -> None:
    from langchain_core.runnables import RunnableLambda

    async def body(value: Any, run_manager: Any, config: Any) -> Any:
        return (value, run_manager.run_id is not None)

    assert await lc.acall_with_config(RunnableLambda(lambda x: x), body, 5, {}) == (5, True)


def test_langchain_openai_shims() -> None:
    from langchain_core.messages import HumanMessage

    model = _chat_model(extra_body={"cache_salt": "s"})
    assert lc.model_default_params(model)["extra_body"] == {"cache_salt": "s"}
    payload = lc.chat_request_payload(model, [HumanMessage("hi")])
    assert payload["messages"] == [{"role": "user", "content": "hi"}]
    wrapped = lc.with_async_client(model, lambda client: ("shim", client))
    assert wrapped is not model and wrapped.async_client == ("shim", model.async_client)
    assert model.async_client != wrapped.async_client  # the user's model is untouched


def test_agent_warm_shims() -> None:
    from langchain_core.load import dumpd
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    model = _chat_model()
    messages = [HumanMessage("hi"), AIMessage("", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c1"}]),
                ToolMessage("r", tool_call_id="c1", name="f")]
    # the messages as the model's own payload builder converts them
    assert lc.chat_completions_messages(messages) == lc.chat_request_payload(model, messages)["messages"]
    assert lc.serialized_chat_endpoint(dumpd(model)) == "http://127.0.0.1:9/v1"
    assert lc.serialized_chat_endpoint(dumpd(_chat_model(use_responses_api=True))) is None
    assert lc.serialized_chat_endpoint({"id": ["x", "ChatAnthropic"], "kwargs": {}}) is None


def test_openai_sdk_shims() -> None:
    import httpx
    import openai

    model = _chat_model(timeout=7.0, max_retries=4)
    client = openai_sdk.resource_client(model.async_client)
    assert client is model.root_async_client and client.max_retries == 4 and client.timeout == 7.0
    assert openai_sdk.resource_client(object()) is None
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    response = httpx.Response(400, content=b'{"error": {"message": "too long"}}', request=request)
    err = openai_sdk.status_error_from_response(client, response)
    assert isinstance(err, openai.BadRequestError) and "too long" in str(err)


# ---- a missing internal fails optimize() loudly ------------------------------------------------------


def _break_openai_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    from openai._resource import AsyncAPIResource

    monkeypatch.setattr(AsyncAPIResource, "__annotations__", {})


def _remove(module: str, qualname: str, attr: str) -> Any:
    def remove(monkeypatch: pytest.MonkeyPatch) -> None:
        import importlib

        monkeypatch.delattr(getattr(importlib.import_module(module), qualname), attr)
    return remove


@pytest.mark.parametrize(("break_it", "touchpoint"), [
    (_remove("langchain_core.runnables.base", "RunnableBindingBase", "_merge_configs"), lc.BINDING_MERGE_CONFIGS),
    (_remove("langchain_core.retrievers", "BaseRetriever", "_get_ls_params"), lc.RETRIEVER_LS_PARAMS),
    (_remove("langchain_core.runnables.base", "Runnable", "_acall_with_config"), lc.RUNNABLE_ACALL_WITH_CONFIG),
    (_remove("langchain_openai.chat_models.base", "BaseChatOpenAI", "_get_request_payload"),
     lc.CHAT_REQUEST_PAYLOAD),
    (_remove("langchain_openai.llms.base", "BaseOpenAI", "_default_params"), lc.LLM_DEFAULT_PARAMS),
    (_remove("openai._base_client", "BaseClient", "_make_status_error_from_response"), openai_sdk.STATUS_ERROR),
    (_break_openai_resource, openai_sdk.RESOURCE_CLIENT),
], ids=lambda v: getattr(v, "name", ""))
def test_optimize_raises_shim_error_naming_the_missing_internal(monkeypatch: pytest.MonkeyPatch, break_it: Any,
                                                                 touchpoint: tp.Touchpoint) -> None:
    from langchain_core.runnables import RunnableLambda

    import ayo_langchain
    from ayo_langchain import capture

    def no_capture(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("capture ran before the touchpoints were verified")

    break_it(monkeypatch)
    monkeypatch.setattr(tp, "_verified", set())  # as in a fresh process
    monkeypatch.setattr(capture.Capturer, "capture", no_capture)
    with pytest.raises(tp.ShimError) as err:
        ayo_langchain.optimize(RunnableLambda(lambda x: x))
    assert touchpoint.name in str(err.value) and touchpoint.framework in str(err.value)


def test_a_changed_model_field_fails_optimize(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_core.runnables import RunnableLambda
    from langchain_openai.chat_models.base import BaseChatOpenAI

    import ayo_langchain

    fields = {k: v for k, v in BaseChatOpenAI.model_fields.items() if k != "async_client"}
    monkeypatch.setattr(BaseChatOpenAI, "model_fields", fields)
    monkeypatch.setattr(tp, "_verified", set())
    with pytest.raises(tp.ShimError) as err:
        ayo_langchain.optimize(RunnableLambda(lambda x: x))
    assert lc.CHAT_ASYNC_CLIENT.name in str(err.value) and "has no field async_client" in str(err.value)
