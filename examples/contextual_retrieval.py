"""contextual_retrieval — LlamaIndex: an LLM situates every chunk in its document before indexing.

Anthropic's "contextual retrieval" with LlamaIndex's stock ``DocumentContextExtractor``:
each call splits the documents it is given, asks the model for a short context for
every chunk *given the whole document* (all chunks of a document share that
document as their prompt prefix, which is where prefix caching pays), embeds the
contextualized chunks into Chroma, then retrieves and answers (compact). Stock
LlamaIndex code; the optimized app is the same function after one line:
``ayo_llamaindex.optimize(answer)``.

    python -m examples.contextual_retrieval            # stock, first question
    python -m examples.contextual_retrieval --ayo      # optimized
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import chromadb
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.extractors import DocumentContextExtractor
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore
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
    splitter = SentenceSplitter(chunk_size=128, chunk_overlap=16)

    def answer(question: str, documents: list[Document]) -> Any:
        docstore = SimpleDocumentStore()
        docstore.add_documents(documents)
        context_extractor = DocumentContextExtractor(
            docstore=docstore, llm=llm, max_context_length=2000, max_output_tokens=32,
            prompt=DocumentContextExtractor.SUCCINCT_CONTEXT_PROMPT, num_workers=8, show_progress=False,
        )
        name = f"contextual-{uuid.uuid4().hex}"  # one collection per conversation
        vector_store = ChromaVectorStore(chroma_collection=chroma.get_or_create_collection(name, embedding_function=None))
        try:
            index = VectorStoreIndex.from_documents(
                documents,
                storage_context=StorageContext.from_defaults(vector_store=vector_store, docstore=docstore),
                embed_model=embed_model,
                transformations=[splitter, context_extractor],
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
