"""Offline: the request Ayo sends for a user's LLM equals the one the stock class sends.

The stock LLM gets an httpx ``MockTransport`` that records the JSON body the openai SDK
posts; Ayo's ``LLMBinding`` builds its request for a twin LLM without that client.
"""

from __future__ import annotations

import json

import httpx
import pytest
from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
from llama_index.core.llms import ChatMessage, CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.postprocessor import LLMRerank
from llama_index.core.prompts import PromptTemplate
from llama_index.core.prompts.default_prompt_selectors import (
    DEFAULT_REFINE_PROMPT_SEL,
    DEFAULT_TEXT_QA_PROMPT_SEL,
    DEFAULT_TREE_SUMMARIZE_PROMPT_SEL,
)
from llama_index.core.schema import TextNode
from llama_index.llms.openai_like import OpenAILike

from ayo_llamaindex.llm import LLMBinding, recognize_llm

CHAT_ANSWER = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
COMPLETION_ANSWER = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                     "choices": [{"index": 0, "text": "ok", "finish_reason": "stop", "logprobs": None}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def _recording_llm(seen: list, **kw) -> OpenAILike:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content)))
        answer = CHAT_ANSWER if request.url.path.endswith("chat/completions") else COMPLETION_ANSWER
        return httpx.Response(200, json=answer)

    return OpenAILike(http_client=httpx.Client(transport=httpx.MockTransport(handler)), **kw)


def _kwargs(**over) -> dict:
    base = dict(model="SmolLM2-135M-Instruct", api_base="http://127.0.0.1:1/v1", api_key="none",
                temperature=0.0, max_tokens=32)
    base.update(over)
    return base


def _check(stock_call, ayo_request, seen) -> None:
    stock_call()
    path, body = seen[-1]
    body.pop("stream", None)
    assert path.endswith("chat/completions" if ayo_request.kind == "chat" else "/completions")
    assert ayo_request.body == body


VARIANTS = [
    dict(is_chat_model=True),
    dict(is_chat_model=False),
    dict(is_chat_model=True, system_prompt="Be brief.", additional_kwargs={"stop": ["\n\n"], "seed": 3}),
    dict(is_chat_model=False, system_prompt="Be brief.", additional_kwargs={"top_p": 0.5}),
    dict(is_chat_model=False, max_tokens=None, completion_to_prompt=lambda p: f"<s>{p}</s>"),
    dict(is_chat_model=True, additional_kwargs={"extra_body": {"top_k": 1}}),
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("template,args", [
    (DEFAULT_TEXT_QA_PROMPT_SEL.partial_format(query_str="What is JSON?"), {"context_str": "JSON is a format."}),
    (DEFAULT_REFINE_PROMPT_SEL.partial_format(query_str="Q?", existing_answer="A."), {"context_msg": "more"}),
    (DEFAULT_TREE_SUMMARIZE_PROMPT_SEL.partial_format(query_str="Q?"), {"context_str": ["a", "b"]}),
    (PromptTemplate("Say {x}."), {"x": "hi"}),
])
def test_predict_request_matches_stock(variant, template, args) -> None:
    seen: list = []
    stock = _recording_llm(seen, **_kwargs(**variant))
    binding = LLMBinding(OpenAILike(**_kwargs(**variant)))
    assert binding.recognized, binding.reason
    _check(lambda: stock.predict(template, **args), binding.predict_request(template, **args), seen)


@pytest.mark.parametrize("variant", VARIANTS)
def test_complete_request_matches_stock(variant) -> None:
    seen: list = []
    stock = _recording_llm(seen, **_kwargs(**variant))
    binding = LLMBinding(OpenAILike(**_kwargs(**variant)))
    prompt = "Generate 2 search queries, one on each line, related to:\nQuery: json\nQueries:\n"
    _check(lambda: stock.complete(prompt), binding.complete_request(prompt), seen)


@pytest.mark.parametrize("is_chat", [True, False])
def test_llm_rerank_request_matches_stock(is_chat) -> None:
    seen: list = []
    stock = _recording_llm(seen, **_kwargs(is_chat_model=is_chat))
    twin = OpenAILike(**_kwargs(is_chat_model=is_chat))
    rerank_stock = LLMRerank(llm=stock, choice_batch_size=2, top_n=2)
    rerank_twin = LLMRerank(llm=twin, choice_batch_size=2, top_n=2)
    batch = [TextNode(text="alpha", id_="1"), TextNode(text="beta", id_="2")]
    binding = LLMBinding(twin)
    req = binding.predict_request(rerank_twin.choice_select_prompt, **rerank_twin._get_predict_kwargs(batch, "q"))
    _check(lambda: stock.predict(rerank_stock.choice_select_prompt,
                                 **rerank_stock._get_predict_kwargs(batch, "q")), req, seen)


def test_chat_request_for_non_chat_model_uses_messages_to_prompt() -> None:
    seen: list = []
    stock = _recording_llm(seen, **_kwargs(is_chat_model=False))
    binding = LLMBinding(OpenAILike(**_kwargs(is_chat_model=False)))
    messages = [ChatMessage(role="user", content="hello")]
    _check(lambda: stock.chat(messages), binding.chat_request(messages), seen)


class _EchoLLM(CustomLLM):
    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs) -> CompletionResponse:
        return CompletionResponse(text=prompt[-10:])

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs):
        yield CompletionResponse(text=prompt[-10:], delta=prompt[-10:])


class _PatchedOpenAILike(OpenAILike):
    def _get_model_kwargs(self, **kwargs):
        return {**super()._get_model_kwargs(**kwargs), "n": 1}


@pytest.mark.parametrize("llm,expected", [
    (OpenAILike(**_kwargs(is_chat_model=True)), True),
    (_EchoLLM(), False),
    (_PatchedOpenAILike(**_kwargs()), False),
    (OpenAILike(**_kwargs(default_headers={"X-A": "1"})), False),
])
def test_recognize_llm(llm, expected) -> None:
    ok, reason = recognize_llm(llm)
    assert ok is expected
    assert ok or reason


async def test_opaque_llm_is_called_as_the_users_object() -> None:
    binding = LLMBinding(_EchoLLM())
    assert not binding.recognized
    text = await binding.predict(None, PromptTemplate("say {x}"), x="hello there")
    assert text == _EchoLLM().predict(PromptTemplate("say {x}"), x="hello there")


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("system_prompt", [None, "Be brief."])
def test_prefill_prefix_is_a_prefix_of_the_final_request(chat, system_prompt) -> None:
    from ayo_core.engines.openai_request import SENTINEL
    from ayo_llamaindex.prefill import prefix_of

    binding = LLMBinding(OpenAILike(**_kwargs(is_chat_model=chat, system_prompt=system_prompt)))
    for template, late, final_args in [
        (DEFAULT_TEXT_QA_PROMPT_SEL.partial_format(query_str="Q?"), ("context_str",), {"context_str": "ctx"}),
        (DEFAULT_REFINE_PROMPT_SEL.partial_format(query_str="What is JSON?"), ("existing_answer", "context_msg"),
         {"existing_answer": "An answer.", "context_msg": "more"}),
    ]:
        prefix = prefix_of(binding, template, late)
        final = binding.predict_request(template, **final_args)
        if not chat:
            assert final.body["prompt"].startswith(prefix["prompt"]) and SENTINEL not in prefix["prompt"]
        else:
            *head, last = prefix["messages"]
            assert final.body["messages"][: len(head)] == head
            assert final.body["messages"][len(head)]["content"].startswith(last["content"])
    refine = prefix_of(binding, DEFAULT_REFINE_PROMPT_SEL.partial_format(query_str="What is JSON?"),
                       ("existing_answer", "context_msg"))
    # completion refine template: "The original query is as follows: {query_str}..." -> the question is
    # in the warmed head; the chat one puts the query after the context (a static head, cached anyway)
    assert ("What is JSON?" in str(refine)) is (not chat)


async def test_real_api_keys_are_sent_like_the_openai_sdk() -> None:
    from ayo_core.engines import get_llm_engine

    def llm_engine_for(base_url: str, model: str, api_key: str, timeout: float) -> object:
        return get_llm_engine(base_url, model=model, api_key=api_key, timeout=timeout)  # what the adapter calls

    plain = llm_engine_for("http://127.0.0.1:1/v1", "m", "none", 5.0)
    assert plain is get_llm_engine("http://127.0.0.1:1/v1", model="m")
    keyed = llm_engine_for("http://127.0.0.1:1/v1", "m", "sk-secret", 5.0)
    assert keyed is not plain and keyed is llm_engine_for("http://127.0.0.1:1/v1", "m", "sk-secret", 5.0)
    assert keyed._client().headers["Authorization"] == "Bearer sk-secret"
    assert "Authorization" not in plain._client().headers
