"""What the five example apps share: where the engines are, and the questions.

The apps themselves (``examples/<app>.py``) are plain LlamaIndex / LangChain code;
this module only tells them where the LLM server, the embedding model, Chroma and
the search service live, and loads the question files with their documents.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ayo_core.models import LLM_NAME, ayo_home, embedding_model_path

from .corpus import get_documents

DATA_DIR = Path(__file__).resolve().parent / "data"
APPS = ("naive_rag", "advanced_rag", "search_augmented", "contextual_retrieval", "agent", "graph", "chat", "sub_question")


def _default_llm_url() -> str:
    url = os.environ.get("AYO_LLM_URL")
    if not url:
        raise RuntimeError(
            "No LLM server: set AYO_LLM_URL to an OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1) "
            "or run the app through `ayo compare APP`, which starts one."
        )
    return url


@dataclass(frozen=True)
class EnginesConfig:
    """Where an app finds its engines. Stock and optimized apps get the same one."""

    llm_url: str = field(default_factory=_default_llm_url)
    model: str = LLM_NAME
    max_tokens: int = 64  # modest: every run on a 2-core CPU pays for each token
    embed_model_path: str = field(default_factory=lambda: str(embedding_model_path()))
    chroma_dir: str = field(default_factory=lambda: str(ayo_home() / "chroma" / "examples"))
    search_url: str = ""  # the loopback search service (ayo_examples.search_service)
    # an OpenAI-compatible embedding server (TEI, vLLM, Infinity; ``.../v1``) serving EMBED_MODEL_NAME:
    # set, the apps embed there; empty, in-process with HuggingFace on embed_model_path
    embed_url: str = ""


EMBED_MODEL_NAME = "all-MiniLM-L6-v2"


def llamaindex_embedding(cfg: EnginesConfig) -> Any:
    """The apps' LlamaIndex embedding model: ``OpenAILikeEmbedding`` at ``cfg.embed_url`` when set,
    else ``HuggingFaceEmbedding`` on the local model folder (the default)."""
    if cfg.embed_url:
        from llama_index.embeddings.openai_like import OpenAILikeEmbedding

        return OpenAILikeEmbedding(model_name=EMBED_MODEL_NAME, api_base=cfg.embed_url, api_key="unused")
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    return HuggingFaceEmbedding(model_name=cfg.embed_model_path, device="cpu")


def load_questions(app: str, n: int | None = None) -> list[dict[str, Any]]:
    """The app's questions (``examples/data/APP.json``), documents attached as ``documents``."""
    path = DATA_DIR / f"{app}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python -m examples.data.make_questions`")
    items = json.loads(path.read_text(encoding="utf-8"))["questions"][:n]
    for item in items:
        item["documents"] = get_documents(item.get("docs", []))
    return items


async def call_async(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a document-QA function the best way it offers: its async form, else a thread.

    A plain function runs in a worker thread (how a sync app serves concurrent users);
    an object with an async ``acall`` or an ``async def`` is awaited.
    """
    acall = getattr(fn, "acall", None)
    if acall is not None and inspect.iscoroutinefunction(acall):
        return await acall(*args)
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    return await asyncio.to_thread(fn, *args)


def answer_text(result: Any) -> str:
    """The answer's text from whatever the framework returned (Response, str, dict)."""
    if isinstance(result, dict):
        return str(result.get("output", result))
    if hasattr(result, "response"):  # LlamaIndex Response
        return str(result.response)
    return str(result)


def main_for(module: Any, argv: list[str] | None = None) -> None:
    """``python -m examples.APP [--ayo] [-q N]``: answer one question, stock or optimized."""
    import argparse
    import time

    from .search_service import SearchService

    app_name = module.__spec__.name.rsplit(".", 1)[-1]
    parser = argparse.ArgumentParser(prog=f"python -m examples.{app_name}")
    parser.add_argument("--ayo", action="store_true", help="run the optimized app (needs the adapter)")
    parser.add_argument("-q", type=int, default=0, help="question index (default 0)")
    args = parser.parse_args(argv)
    item = load_questions(app_name)[args.q]
    with SearchService() as search:  # started for every app: cheap, and the agent and search apps need it
        cfg = EnginesConfig(search_url=search.url)
        app = module.build_optimized(cfg) if args.ayo else module.build_stock(cfg)
        start = time.perf_counter()
        answer = module.run(app, item)
        elapsed = time.perf_counter() - start
    print(f"Q: {item['question']}\nA: {answer}\n({elapsed:.2f} s, {'ayo' if args.ayo else 'stock'})")
