"""naive_rag — document QA with LlamaIndex: the question comes with its documents.

Each call indexes the documents it is given (split, embed, store in Chroma), then
retrieves and answers with compact synthesis: a "chat with these files" app.
Stock LlamaIndex code; the optimized app is the same function after one line:
``ayo_llamaindex.optimize(answer)``.

    python -m examples.naive_rag            # stock, first question
    python -m examples.naive_rag --ayo      # optimized
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import chromadb
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter
from llama_index.llms.openai_like import OpenAILike
from llama_index.vector_stores.chroma import ChromaVectorStore

from .common import EnginesConfig, answer_text, call_async, llamaindex_embedding

FRAMEWORK = "llamaindex"


def build_stock(cfg: EnginesConfig) -> Callable[[str, list[Document]], Any]:
    llm = OpenAILike(
        model=cfg.model, api_base=cfg.llm_url, api_key="unused", is_chat_model=True,
        temperature=0.0, max_tokens=cfg.max_tokens, context_window=8192,
    )
    embed_model = llamaindex_embedding(cfg)
    chroma = chromadb.PersistentClient(path=cfg.chroma_dir)
    splitter = SentenceSplitter(chunk_size=256, chunk_overlap=32)

    def answer(question: str, documents: list[Document]) -> Any:
        name = f"naive-rag-{uuid.uuid4().hex}"  # one collection per conversation
        vector_store = ChromaVectorStore(chroma_collection=chroma.get_or_create_collection(name, embedding_function=None))
        try:
            index = VectorStoreIndex.from_documents(
                documents,
                storage_context=StorageContext.from_defaults(vector_store=vector_store),
                embed_model=embed_model,
                transformations=[splitter],
            )
            query_engine = index.as_query_engine(
                llm=llm, similarity_top_k=3, response_mode="compact", use_async=True
            )
            return query_engine.query(question)
        finally:
            chroma.delete_collection(name)

    return answer


def build_optimized(cfg: EnginesConfig) -> Any:
    import ayo_llamaindex

    return ayo_llamaindex.optimize(build_stock(cfg))


def documents_of(item: dict[str, Any]) -> list[Document]:
    return [Document(text=d["text"], id_=d["id"], metadata={"title": d["title"]}) for d in item["documents"]]


def run(app: Any, item: dict[str, Any]) -> str:
    return answer_text(app(item["question"], documents_of(item)))


async def arun(app: Any, item: dict[str, Any]) -> str:
    return answer_text(await call_async(app, item["question"], documents_of(item)))


if __name__ == "__main__":
    import sys

    from .common import main_for

    main_for(sys.modules[__name__])
