"""MiniRAG: a deliberately small RAG framework over the OpenAI SDK, the conformance suite's third framework.

It is written the way a framework is (the adapter in ``ayo_minirag.py`` does not change it): a
:class:`Pipeline` is retrieve -> prompt -> generate, answered by ``run``/``arun`` and streamed by
``stream``/``astream``; every step reports to the pipeline's handlers through :class:`Events`
(start with its inputs, end with its output, or error), under one root run per call.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import openai


class Handler(Protocol):
    def on_start(self, run_id: str, parent_id: str | None, name: str, inputs: Any) -> None: ...
    def on_end(self, run_id: str, name: str, output: Any) -> None: ...
    def on_error(self, run_id: str, name: str, error: BaseException) -> None: ...


@dataclass
class Events:
    """What a pipeline's handlers are told: ``start`` returns the run's id, ``end``/``error`` close it."""

    handlers: list[Handler] = field(default_factory=list)

    def start(self, parent: str | None, name: str, inputs: Any) -> str:
        run_id = uuid.uuid4().hex
        for h in self.handlers:
            h.on_start(run_id, parent, name, inputs)
        return run_id

    def end(self, run_id: str, name: str, output: Any) -> Any:
        for h in self.handlers:
            h.on_end(run_id, name, output)
        return output

    def error(self, run_id: str, name: str, error: BaseException) -> None:
        for h in self.handlers:
            h.on_error(run_id, name, error)


@dataclass
class Retrieve:
    """The user's search: ``search(question) -> list[str]`` (and its async twin, when the user has one)."""

    search: Callable[[str], list[str]]
    asearch: Callable[[str], Awaitable[list[str]]] | None = None


@dataclass
class Prompt:
    template: str = "Context: {context}\nQuestion: {question}"

    def messages(self, question: str, docs: list[str]) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.template.format(context="\n\n".join(docs), question=question)}]


@dataclass
class Generate:
    """A chat model behind an OpenAI-compatible server."""

    model: str
    base_url: str
    api_key: str = "none"
    max_tokens: int = 40

    def _kwargs(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        return {"model": self.model, "messages": messages, "max_tokens": self.max_tokens, "temperature": 0.0}

    def complete(self, messages: list[dict[str, str]]) -> str:
        client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0)
        return client.chat.completions.create(**self._kwargs(messages)).choices[0].message.content or ""

    async def acomplete(self, messages: list[dict[str, str]]) -> str:
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0)
        return (await client.chat.completions.create(**self._kwargs(messages))).choices[0].message.content or ""

    def stream(self, messages: list[dict[str, str]]) -> Iterator[str]:
        client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0)
        for chunk in client.chat.completions.create(**self._kwargs(messages), stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content

    async def astream(self, messages: list[dict[str, str]]) -> AsyncIterator[str]:
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0)
        async for chunk in await client.chat.completions.create(**self._kwargs(messages), stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content


@dataclass
class Pipeline:
    retrieve: Retrieve
    generate: Generate
    prompt: Prompt = field(default_factory=Prompt)
    events: Events = field(default_factory=Events)

    # -- the steps before the model, reported as steps ---------------------------------------------
    def _context(self, root: str, question: str) -> list[dict[str, str]]:
        run = self.events.start(root, "retrieve", question)
        try:
            docs = self.events.end(run, "retrieve", self.retrieve.search(question))
        except Exception as exc:
            self.events.error(run, "retrieve", exc)
            raise
        return self._messages(root, question, docs)

    async def _acontext(self, root: str, question: str) -> list[dict[str, str]]:
        run = self.events.start(root, "retrieve", question)
        try:
            search = self.retrieve.asearch
            docs = await search(question) if search else await asyncio.to_thread(self.retrieve.search, question)
        except Exception as exc:
            self.events.error(run, "retrieve", exc)
            raise
        return self._messages(root, question, self.events.end(run, "retrieve", docs))

    def _messages(self, root: str, question: str, docs: list[str]) -> list[dict[str, str]]:
        run = self.events.start(root, "prompt", {"question": question, "docs": docs})
        return self.events.end(run, "prompt", self.prompt.messages(question, docs))

    # -- the calls ------------------------------------------------------------------------------------
    def run(self, question: str) -> str:
        root = self.events.start(None, "pipeline", question)
        try:
            messages = self._context(root, question)
            run = self.events.start(root, "generate", messages)
            answer = self.events.end(run, "generate", self.generate.complete(messages))
        except Exception as exc:
            self.events.error(root, "pipeline", exc)
            raise
        return self.events.end(root, "pipeline", answer)

    async def arun(self, question: str) -> str:
        root = self.events.start(None, "pipeline", question)
        try:
            messages = await self._acontext(root, question)
            run = self.events.start(root, "generate", messages)
            answer = self.events.end(run, "generate", await self.generate.acomplete(messages))
        except Exception as exc:
            self.events.error(root, "pipeline", exc)
            raise
        return self.events.end(root, "pipeline", answer)

    def stream(self, question: str) -> Iterator[str]:
        root = self.events.start(None, "pipeline", question)
        try:
            messages = self._context(root, question)
            run = self.events.start(root, "generate", messages)
            chunks = []
            for chunk in self.generate.stream(messages):
                chunks.append(chunk)
                yield chunk
            self.events.end(run, "generate", "".join(chunks))
        except Exception as exc:
            self.events.error(root, "pipeline", exc)
            raise
        self.events.end(root, "pipeline", "".join(chunks))

    async def astream(self, question: str) -> AsyncIterator[str]:
        root = self.events.start(None, "pipeline", question)
        try:
            messages = await self._acontext(root, question)
            run = self.events.start(root, "generate", messages)
            chunks = []
            async for chunk in self.generate.astream(messages):
                chunks.append(chunk)
                yield chunk
            self.events.end(run, "generate", "".join(chunks))
        except Exception as exc:
            self.events.error(root, "pipeline", exc)
            raise
        self.events.end(root, "pipeline", "".join(chunks))
