"""The adapter conformance suite's cases: one :class:`AdapterCase` per adapter, behind the ``case`` fixture.

Every case builds the same small RAG pipeline in its framework (vector retrieval over the same
documents, a user component Ayo runs as-is, the framework's prompt, an OpenAI-compatible chat
model, the answer text) and exposes it through one surface, so ``test_conformance.py`` checks
every adapter the same way. A third adapter is done when its case, added to ``CASES``, passes.

Offline and deterministic: both models talk to one in-memory fake OpenAI server
(``tests/ayo_langchain/lc_helpers.py``'s: answers derived from the prompt), LangChain's through
its httpx transport, LlamaIndex's ``OpenAILike`` through a loopback socket (given its own httpx
client it would not be recognized). The user component (:class:`~tests.adapters.common.Knobs`)
can be made slow or failing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import httpx
import pytest

from tests.adapters.common import Event, Knobs, VLLMLikeServer, serve_on_loopback
from tests.ayo_langchain.lc_helpers import FAKE_URL


class AdapterCase(Protocol):
    """What the conformance checks need from an adapter; ``obj`` is a stock pipeline or its optimized twin."""

    name: str
    knobs: Knobs  # the user component of every pipeline this case builds
    recognized: tuple[str, ...]  # what explain() must name: the modules Ayo lowers in this pipeline
    known_differences: dict[str, str]  # check -> the documented reason this adapter differs from stock today
    unreported_events: frozenset[str]  # event labels stock reports and this adapter (documentedly) does not

    def build_stock(self, streaming: bool = False) -> Any:
        """The stock pipeline: retrieval, the user component, prompt, model, answer text."""

    def optimize(self, stock: Any) -> Any: ...

    def call(self, obj: Any, question: str) -> str:
        """The answer text of a sync call."""

    async def acall(self, obj: Any, question: str) -> str: ...

    def stream(self, obj: Any, question: str) -> list[str]:
        """The text chunks of a sync stream (of a ``build_stock(streaming=True)`` pipeline)."""

    async def astream(self, obj: Any, question: str) -> list[str]: ...

    def events(self, obj: Any, question: str) -> list[Event]:
        """What the framework's callback handlers saw during a sync call: every event as its path from the root."""

    def bad_input(self, obj: Any) -> Any:
        """Call ``obj`` with an input stock rejects (the error is compared, not predicted)."""

    def explain(self, obj: Any) -> str: ...

    def trace(self, obj: Any) -> Any:
        """The optimized object's last trace (``ayo_core.trace.Trace``)."""


CASES = ["llamaindex", "llamaindex-chat", "langchain", "minirag"]


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest) -> AdapterCase:
    if request.param == "llamaindex":
        from tests.adapters.li_case import LlamaIndexCase

        return LlamaIndexCase(request.getfixturevalue("li_world"), Knobs())
    if request.param == "minirag":  # a third framework and its adapter, written on the core's public path
        from tests.adapters.minirag_case import MiniRAGCase

        return MiniRAGCase(request.getfixturevalue("fake_openai")[1], Knobs())
    if request.param == "llamaindex-chat":  # the same adapter's chat-engine stand-in
        from tests.adapters.li_case import LlamaIndexChatCase

        return LlamaIndexChatCase(request.getfixturevalue("li_world"), Knobs())
    from tests.adapters.lc_case import LangChainCase

    return LangChainCase(request.getfixturevalue("fake_transport"), request.getfixturevalue("lc_vectorstore"),
                         Knobs())


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[tuple[VLLMLikeServer, str]]:
    """The fake server and its loopback URL (``.../v1``), for the whole session."""
    fake = VLLMLikeServer()
    server = serve_on_loopback(fake)
    yield fake, server.url
    server.close()


@pytest.fixture
def fake_transport(fake_openai: tuple[VLLMLikeServer, str], monkeypatch: pytest.MonkeyPatch) -> VLLMLikeServer:
    """Ayo's ``LLMEngine`` for ``FAKE_URL`` reaches the fake in memory (``tests/ayo_langchain``'s ``fake_server``)."""
    from ayo_core.engines import llm_client

    fake, _url = fake_openai
    original = llm_client.LLMEngine._client

    def client(self: Any) -> httpx.AsyncClient:
        if not self.base_url.startswith(FAKE_URL):
            return original(self)
        return httpx.AsyncClient(transport=fake.transport())

    monkeypatch.setattr(llm_client.LLMEngine, "_client", client)
    return fake


@pytest.fixture(scope="session")
def li_world(fake_openai: tuple[VLLMLikeServer, str]) -> Any:
    from tests.adapters.li_case import LlamaIndexWorld

    return LlamaIndexWorld.make(fake_openai[1])


@pytest.fixture(scope="session")
def lc_vectorstore(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.adapters.lc_case import make_vectorstore

    return make_vectorstore(tmp_path_factory.mktemp("chroma"))
