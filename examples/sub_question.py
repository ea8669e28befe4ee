"""sub_question — LlamaIndex ``SubQuestionQueryEngine`` over three indexes of the corpus.

Three topic indexes (text formats, data structures, system and files), each a query engine
behind a ``QueryEngineTool``; the engine splits a question that spans two topics into
sub-questions, answers each with its tool's engine, then synthesizes. Stock LlamaIndex code;
the optimized app is the same engine after one line: ``ayo_llamaindex.optimize(query_engine)``.

What a user with the 135M model does to get valid sub-question JSON: an output budget that
fits the list, and vLLM's structured outputs (``structured_outputs: {"json": schema}`` in the
request body, through ``OpenAILike(additional_kwargs={"extra_body": ...})``) on the question
generator's LLM only. ``use_async=True`` is ``from_defaults``' default (stock at its best: the
sub-questions are answered concurrently); the constructor's own default, ``use_async=False``,
answers them one after another.

    python -m examples.sub_question            # stock, first question
    python -m examples.sub_question --ayo      # optimized
"""

from __future__ import annotations

import functools
from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.query_engine import SubQuestionQueryEngine
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.tools import QueryEngineTool
from llama_index.llms.openai_like import OpenAILike

from .common import EnginesConfig, answer_text, llamaindex_embedding
from .corpus import load_corpus

FRAMEWORK = "llamaindex"
GENERATOR_MAX_TOKENS = 256  # the schema caps the list at 3 items of <= 100 characters: it always fits
# tool name -> (description, corpus modules indexed)
TOPICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "text_formats": ("Python standard library modules for text and data formats (json, csv, base64, html, pickle)",
                     ("base64", "csv", "html", "json", "pickle")),
    "data_structures": ("Python standard library modules for data structures and algorithms (collections, heapq, "
                        "bisect, queue, functools)", ("bisect", "collections", "functools", "heapq", "queue")),
    "system_files": ("Python standard library modules for files, paths and processes (os, pathlib, shutil, glob, "
                     "subprocess)", ("glob", "os", "pathlib", "shutil", "subprocess")),
}
QUESTIONS_PER_APP = 30
TEMPLATES = (
    "Compare {a} and {b}: what does each one do?",
    "What is the difference between what {a} does and what {b} does?",
    "I need {a} and {b} in one script. What does each do?",
)


def module_of(doc_id: str) -> str:
    return doc_id if doc_id in {m for _, mods in TOPICS.values() for m in mods} else doc_id.rsplit(".", 1)[0]


def topic_documents() -> dict[str, list[dict[str, str]]]:
    """The corpus documents of each topic, in corpus order."""
    docs = load_corpus()
    return {name: [d for d in docs if module_of(d["id"]) in mods] for name, (_, mods) in TOPICS.items()}


def sub_question_schema() -> dict[str, Any]:
    """JSON schema of the list ``LLMQuestionGenerator``'s parser reads: ``{"items": [{sub_question, tool_name}]}``."""
    item = {"type": "object", "properties": {"sub_question": {"type": "string", "maxLength": 100},
                                             "tool_name": {"type": "string", "enum": list(TOPICS)}},
            "required": ["sub_question", "tool_name"]}
    return {"type": "object", "properties": {"items": {"type": "array", "items": item, "minItems": 1, "maxItems": 3}},
            "required": ["items"]}


@functools.lru_cache(maxsize=4)
def _indexes(embed_model_path: str, embed_url: str = "") -> dict[str, VectorStoreIndex]:
    """One in-memory index per topic, built once per process (stock and optimized apps share them)."""
    embed_model = llamaindex_embedding(EnginesConfig(llm_url="", embed_model_path=embed_model_path,
                                                     embed_url=embed_url))
    splitter = SentenceSplitter(chunk_size=256, chunk_overlap=32)
    return {name: VectorStoreIndex.from_documents(
        [Document(text=d["text"], id_=d["id"], metadata={"title": d["title"]}) for d in docs],
        embed_model=embed_model, transformations=[splitter]) for name, docs in topic_documents().items()}


def build_stock(cfg: EnginesConfig) -> SubQuestionQueryEngine:
    llm = OpenAILike(
        model=cfg.model, api_base=cfg.llm_url, api_key="unused", is_chat_model=True,
        temperature=0.0, max_tokens=cfg.max_tokens, context_window=8192,
    )
    json_llm = OpenAILike(
        model=cfg.model, api_base=cfg.llm_url, api_key="unused", is_chat_model=True,
        temperature=0.0, max_tokens=GENERATOR_MAX_TOKENS, context_window=8192,
        additional_kwargs={"extra_body": {"structured_outputs": {"json": sub_question_schema()}}},
    )
    tools = [
        QueryEngineTool.from_defaults(
            index.as_query_engine(llm=llm, similarity_top_k=2, response_mode="compact"),
            name=name, description=TOPICS[name][0],
        )
        for name, index in _indexes(cfg.embed_model_path, cfg.embed_url).items()
    ]
    return SubQuestionQueryEngine.from_defaults(
        query_engine_tools=tools, llm=llm, question_gen=LLMQuestionGenerator.from_defaults(llm=json_llm),
        use_async=True, verbose=False,
    )


def build_optimized(cfg: EnginesConfig) -> Any:
    import ayo_llamaindex

    return ayo_llamaindex.optimize(build_stock(cfg))


def run(app: Any, item: dict[str, Any]) -> str:
    return answer_text(app.query(item["question"]))


async def arun(app: Any, item: dict[str, Any]) -> str:
    return answer_text(await app.aquery(item["question"]))


def make_questions() -> list[dict[str, Any]]:
    """``examples/data/sub_question.json``'s questions: two documents from two topics each, picked by a fixed
    stride over the documents ``make_questions.candidates`` keeps (never by hand, never by a model)."""
    from .data.make_questions import candidates

    pools = {name: candidates(docs) for name, docs in topic_documents().items()}
    names = list(TOPICS)
    out = []
    for k in range(QUESTIONS_PER_APP):
        first, second = names[k % 3], names[(k + 1 + (k // 3) % 2) % 3]
        a = pools[first][(k * 7) % len(pools[first])]["id"]
        b = pools[second][(k * 5 + 3) % len(pools[second])]["id"]
        out.append({"id": f"sub_question-{k + 1:02d}", "question": TEMPLATES[k % len(TEMPLATES)].format(a=a, b=b),
                    "targets": [a, b], "tools": [first, second]})
    return out


def render_questions() -> str:
    import json

    body = {"app": "sub_question",
            "source": "Python standard library docstrings (ayo_examples.corpus); generated by "
                      "examples/sub_question.py make_questions()",
            "questions": make_questions()}
    return json.dumps(body, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    import sys

    from .common import main_for

    if sys.argv[1:] == ["--write-questions"]:
        from .data.make_questions import DATA_DIR

        (DATA_DIR / "sub_question.json").write_text(render_questions(), encoding="utf-8")
    else:
        main_for(sys.modules[__name__])
