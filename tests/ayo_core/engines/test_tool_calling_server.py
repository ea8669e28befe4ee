"""Tool calling on the local server: the tool-aware chat template and vLLM's hermes parser.

The template must render a request without tools exactly as the model's own template (every other
test's prompts, hence answers, depend on it), and a tool call the model writes must come back as an
OpenAI ``tool_calls`` entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from ayo_core.engines.llm_server import TOOLS_CHAT_TEMPLATE, tool_calling_args

MODEL = "SmolLM2-135M-Instruct"
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web for a query",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
TOOL_LESS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b  \n"}, {"role": "user", "content": " c\n"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "a"}, {"role": "system", "content": "S2"}],
]


def _model_dir() -> Path:
    from ayo_core.engines.llm_server import resolve_model

    try:
        return resolve_model(None, "float32")
    except Exception as exc:  # noqa: BLE001 - the models are prepared by `make test`
        pytest.fail(f"the default model is not prepared ({exc})")


@pytest.mark.parametrize("messages", TOOL_LESS)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_tool_less_requests_render_as_the_models_own_template(messages: list, generation_prompt: bool) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_model_dir())
    own = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    ours = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                   chat_template=TOOLS_CHAT_TEMPLATE.read_text())
    assert ours == own


def test_a_tool_conversation_renders_in_the_hermes_format() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_model_dir())
    messages = [
        {"role": "user", "content": "What is 2+3?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
    ]
    text = tok.apply_chat_template(messages, tools=[CALCULATOR], tokenize=False, add_generation_prompt=True,
                                   chat_template=TOOLS_CHAT_TEMPLATE.read_text())
    assert '<tools>\n{"type": "function", "function": {"name": "calculator"' in text
    assert '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>" in text


def test_tool_calling_flags() -> None:
    assert tool_calling_args("auto", None, default_model=True) == [
        "--chat-template", str(TOOLS_CHAT_TEMPLATE), "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    assert tool_calling_args("auto", None, default_model=False) == []  # a user's model: its own template
    assert tool_calling_args("none", None, default_model=True) == []
    assert tool_calling_args("llama3_json", "t.jinja", default_model=False) == [
        "--chat-template", "t.jinja", "--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"]


def test_the_server_returns_the_models_tool_call(tools_llm_url: str) -> None:
    """``tool_choice="required"``: the 135M model rarely calls a tool on its own (see the README);
    when it does write a ``<tool_call>``, the server hands it back parsed."""
    body = {"model": MODEL, "temperature": 0, "max_tokens": 80, "tools": [CALCULATOR, SEARCH],
            "tool_choice": "required", "messages": [{"role": "user", "content": "Search for the capital of France."}]}
    reply = httpx.post(f"{tools_llm_url}/chat/completions", json=body, timeout=300).json()
    calls = reply["choices"][0]["message"]["tool_calls"]
    assert calls and calls[0]["function"]["name"] == "search", reply
    assert isinstance(json.loads(calls[0]["function"]["arguments"]), dict)
