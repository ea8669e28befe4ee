"""chat — a conversational assistant over the Python docs with LlamaIndex's ``condense_plus_context`` chat engine.

The documents of every conversation in ``data/chat.json`` are indexed once (Chroma); each
conversation gets its own chat engine (its own memory) and asks three turns: a question, then
follow-ups ("What arguments does it take?") that the engine condenses into standalone questions
with the history before it retrieves and answers. Stock LlamaIndex code; the optimized app is the
same after one line: ``ayo_llamaindex.optimize(chat_engine)``.

    python -m examples.chat            # stock, first conversation
    python -m examples.chat --ayo      # optimized
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

import chromadb
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.chat_engine.types import BaseChatEngine
from llama_index.core.node_parser import SentenceSplitter
from llama_index.llms.openai_like import OpenAILike
from llama_index.vector_stores.chroma import ChromaVectorStore

from .common import EnginesConfig, llamaindex_embedding, load_questions

FRAMEWORK = "llamaindex"
SYSTEM_PROMPT = "You are a helpful assistant for Python programmers. Answer from the documentation."


@functools.lru_cache(maxsize=4)  # the stock and optimized apps of one process chat with the same knowledge base
def build_index(cfg: EnginesConfig) -> VectorStoreIndex:
    """The knowledge base every conversation chats with: the documents of all conversations."""
    documents: dict[str, Document] = {}
    for item in load_questions("chat"):
        for d in item["documents"]:
            documents[d["id"]] = Document(text=d["text"], id_=d["id"], metadata={"title": d["title"]})
    embed_model = llamaindex_embedding(cfg)
    chroma = chromadb.PersistentClient(path=cfg.chroma_dir)
    name = "chat-" + hashlib.sha1("\n".join(sorted(documents)).encode()).hexdigest()[:16]
    if name in {c.name for c in chroma.list_collections()}:
        chroma.delete_collection(name)  # a fresh index per app process
    vector_store = ChromaVectorStore(chroma_collection=chroma.get_or_create_collection(name, embedding_function=None))
    return VectorStoreIndex.from_documents(
        list(documents.values()),
        storage_context=StorageContext.from_defaults(vector_store=vector_store),
        embed_model=embed_model,
        transformations=[SentenceSplitter(chunk_size=256, chunk_overlap=32)],
    )


def build_stock(cfg: EnginesConfig, index: VectorStoreIndex | None = None) -> Callable[[], BaseChatEngine]:
    """``new_chat()``: a chat engine for one conversation (its own memory)."""
    llm = OpenAILike(
        model=cfg.model, api_base=cfg.llm_url, api_key="unused", is_chat_model=True,
        temperature=0.0, max_tokens=cfg.max_tokens, context_window=8192,
    )
    index = index if index is not None else build_index(cfg)

    def new_chat() -> BaseChatEngine:
        return index.as_chat_engine(chat_mode="condense_plus_context", llm=llm, similarity_top_k=3,
                                    system_prompt=SYSTEM_PROMPT)

    return new_chat


def build_optimized(cfg: EnginesConfig, index: VectorStoreIndex | None = None) -> Callable[[], Any]:
    import ayo_llamaindex

    new_chat = build_stock(cfg, index)
    return lambda: ayo_llamaindex.optimize(new_chat())


def run(app: Callable[[], Any], item: dict[str, Any]) -> str:
    chat_engine = app()
    return "\n".join(str(chat_engine.chat(turn)) for turn in item["turns"])


async def arun(app: Callable[[], Any], item: dict[str, Any]) -> str:
    chat_engine = app()  # stock at its best: the async chat method
    return "\n".join([str(await chat_engine.achat(turn)) for turn in item["turns"]])


if __name__ == "__main__":
    import sys

    from .common import main_for

    main_for(sys.modules[__name__])
