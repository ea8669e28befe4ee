"""LLMEngine against a second server implementation, ``transformers serve --continuous-batching``.

That server ends its streams without ``data: [DONE]``, answers ``priority`` with 422 and has no
``/metrics`` or ``/tokenize``; Ayo reads its streams as the OpenAI SDK does and works without the rest.
"""

from __future__ import annotations

import openai
import pytest

from ayo_core.engines import capabilities, prefix_warming
from ayo_core.engines.llm_client import LLMEngine, LLMRequestError

pytestmark = [pytest.mark.llm, pytest.mark.slow, pytest.mark.timeout(600)]
QUESTION = [{"role": "user", "content": "Name three colors."}]


async def test_streams_read_as_the_sdk_reads_them(transformers_llm_url: str) -> None:
    client = openai.AsyncOpenAI(base_url=transformers_llm_url, api_key="none", max_retries=0)
    stream = await client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=QUESTION,  # type: ignore[arg-type]
                                                  max_tokens=12, temperature=0, stream=True)
    stock = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
    await client.close()
    engine = LLMEngine(transformers_llm_url)
    seen: list[str] = []
    streamed = await engine.chat(QUESTION, max_tokens=12, stream_cb=seen.append)
    plain = await engine.chat(QUESTION, max_tokens=12)
    assert len(stock) > 1 and seen == stock and streamed.text == plain.text == "".join(stock)
    assert streamed.completion_tokens == plain.completion_tokens > 0  # usage comes in the last chunk


async def test_priority_is_dropped_once_and_no_vllm_endpoint_is_needed(transformers_llm_url: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AYO_LLM_DEVICE", raising=False)
    engine = LLMEngine(transformers_llm_url)
    plain = await engine.complete("The sky is", max_tokens=6)
    assert (await engine.complete("The sky is", max_tokens=6, priority=5)).text == plain.text
    assert engine.accepts_priority is False
    caps = await capabilities.server_capabilities(transformers_llm_url)
    assert (caps.prefix_caching, caps.block_size, caps.device) == (None, None, None)  # no /metrics, /server_info
    with pytest.raises(LLMRequestError, match="404"):
        await engine.tokenize(prompt="The sky is")
    try:
        assert await prefix_warming.warm_budget(transformers_llm_url) is None  # never warmed
    finally:
        capabilities.forget(transformers_llm_url)


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
async def test_both_length_fields_are_honoured(transformers_llm_url: str, field: str) -> None:
    # LlamaIndex sends max_tokens, newer LangChain max_completion_tokens: Ayo passes either through as sent
    result = await LLMEngine(transformers_llm_url).chat(QUESTION, **{field: 3})
    assert (result.completion_tokens, result.finish_reason) == (3, "length")
