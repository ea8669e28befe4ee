"""advanced_rag — document QA with LlamaIndex: query expansion, LLM rerank, refine.

Each call indexes the documents it is given (split, embed, store in Chroma), then
``QueryFusionRetriever`` writes extra search queries (3 queries in all) and fuses
their results, ``LLMRerank`` keeps the best chunks, and the refine synthesizer
answers chunk by chunk. Stock LlamaIndex code; the optimized app is the same
function after one line: ``ayo_llamaindex.optimize(answer)``.

    python -m examples.advanced_rag            # stock, first question
    python -m examples.advanced_rag --ayo      # optimized
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

import chromadb
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.postprocessor import LLMRerank
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.llms.openai_like import OpenAILike
from llama_index.vector_stores.chroma import ChromaVectorStore

from .common import EnginesConfig, answer_text, call_async, llamaindex_embedding

FRAMEWORK = "llamaindex"


def parse_choices(answer: str, num_choices: int) -> tuple[list[int], list[float]]:
    """LLMRerank's answer parser, lenient for a small model.

    Any "Doc: N" / "Document N" counts as a pick; when the model names no valid
    document, the retriever's order stands, so reranking never empties the answer.
    """
    picks = [int(n) for n in re.findall(r"Doc(?:ument)?\s*:?\s*(\d+)", answer)]
    picks = list(dict.fromkeys(p for p in picks if 1 <= p <= num_choices)) or list(range(1, num_choices + 1))
    return picks, [1.0] * len(picks)


def build_stock(cfg: EnginesConfig) -> Callable[[str, list[Document]], Any]:
    llm = OpenAILike(
        model=cfg.model, api_base=cfg.llm_url, api_key="unused", is_chat_model=True,
        temperature=0.0, max_tokens=cfg.max_tokens, context_window=8192,
    )
    embed_model = llamaindex_embedding(cfg)
    chroma = chromadb.PersistentClient(path=cfg.chroma_dir)
    splitter = SentenceSplitter(chunk_size=256, chunk_overlap=32)

    def answer(question: str, documents: list[Document]) -> Any:
        name = f"advanced-rag-{uuid.uuid4().hex}"  # one collection per conversation
        vector_store = ChromaVectorStore(chroma_collection=chroma.get_or_create_collection(name, embedding_function=None))
        try:
            index = VectorStoreIndex.from_documents(
                documents,
                storage_context=StorageContext.from_defaults(vector_store=vector_store),
                embed_model=embed_model,
                transformations=[splitter],
            )
            retriever = QueryFusionRetriever(
                [index.as_retriever(similarity_top_k=4)],
                llm=llm, num_queries=3, similarity_top_k=4, mode="reciprocal_rerank", use_async=True,
            )
            query_engine = RetrieverQueryEngine.from_args(
                retriever, llm=llm,
                node_postprocessors=[
                    LLMRerank(llm=llm, top_n=2, choice_batch_size=5, parse_choice_select_answer_fn=parse_choices)
                ],
                response_mode="refine", use_async=True,
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
