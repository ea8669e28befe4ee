"""graph — LangGraph: map-reduce over a question's aspects with ``Send``.

A ``StateGraph`` in three steps: the model splits the question into a few aspects (one per
line); a conditional edge fans out one ``Send("answer_aspect", ...)`` per aspect, so how many
branches run is decided by the model's output at run time; each branch searches the loopback
search service (``ayo_examples.search_service``) for its aspect and answers it from the
results; a reduce step writes the final answer from the notes. The nodes are LCEL runnables,
as LangGraph allows. Stock LangGraph code; the optimized app is the same compiled graph after
one line: ``ayo_langchain.optimize(graph)``.

    python -m examples.graph            # stock, first question
    python -m examples.graph --ayo      # optimized
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from .common import EnginesConfig
from .search_augmented import WebSearchRetriever

FRAMEWORK = "langchain"
MAX_ASPECTS = 3

SPLIT_PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You break questions about Python's standard library into short sub-questions."),
    ("human", "Question: {question}\n\nWrite up to 3 short sub-questions, one per line, and nothing else."),
])
ASPECT_PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You answer questions about Python's standard library using search results."),
    ("human", "Sub-question: {aspect}\n\nSearch results:\n{context}\n\nAnswer the sub-question in two sentences."),
])
REDUCE_PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You answer questions about Python's standard library."),
    ("human", "Question: {question}\n\nNotes:\n{notes}\n\nUsing the notes, answer the question in a few sentences."),
])


class State(TypedDict, total=False):
    question: str
    aspects: list[str]
    notes: Annotated[list[str], operator.add]  # one per aspect; the fan-out's writes are added up
    answer: str


def parse_aspects(text: str) -> dict[str, list[str]]:
    """The model's lines as aspects (list markers stripped), at most ``MAX_ASPECTS``, at least one."""
    lines = [line.strip().lstrip("-*0123456789.) ").strip() for line in text.splitlines()]
    aspects = [line for line in lines if len(line) > 3][:MAX_ASPECTS]
    return {"aspects": aspects}


def fan_out(state: State) -> list[Send]:
    aspects = state.get("aspects") or [state["question"]]
    return [Send("answer_aspect", {"question": state["question"], "aspect": a}) for a in aspects]


def format_results(docs: list[Any]) -> str:
    return "\n\n".join(f"[{d.metadata['title']}] {d.page_content[:400]}" for d in docs[:2])


def build_stock(cfg: EnginesConfig) -> Any:
    llm = ChatOpenAI(model=cfg.model, base_url=cfg.llm_url, api_key="unused", temperature=0.0,
                     max_tokens=cfg.max_tokens)
    if not cfg.search_url:
        raise ValueError("graph needs EnginesConfig.search_url: start ayo_examples.search_service.SearchService")
    search = WebSearchRetriever(url=cfg.search_url, k=2)
    split = SPLIT_PROMPT | llm | StrOutputParser() | RunnableLambda(parse_aspects)
    answer_aspect = (
        RunnablePassthrough.assign(context=(lambda x: x["aspect"]) | search | format_results)
        | RunnablePassthrough.assign(note=ASPECT_PROMPT | llm | StrOutputParser())
        | RunnableLambda(lambda x: {"notes": [f"{x['aspect']}: {x['note']}"]})
    )
    reduce = (
        RunnablePassthrough.assign(notes=lambda s: "\n".join(f"- {n}" for n in s["notes"]))
        | REDUCE_PROMPT | llm | StrOutputParser() | RunnableLambda(lambda text: {"answer": text})
    )
    graph = StateGraph(State)
    graph.add_node("split", split)
    graph.add_node("answer_aspect", answer_aspect)
    graph.add_node("reduce", reduce)
    graph.add_edge(START, "split")
    graph.add_conditional_edges("split", fan_out, ["answer_aspect"])
    graph.add_edge("answer_aspect", "reduce")
    graph.add_edge("reduce", END)
    return graph.compile()


def build_optimized(cfg: EnginesConfig) -> Runnable:
    import ayo_langchain

    return ayo_langchain.optimize(build_stock(cfg))


def run(app: Any, item: dict[str, Any]) -> str:
    return app.invoke({"question": item["question"]})["answer"]


async def arun(app: Any, item: dict[str, Any]) -> str:
    return (await app.ainvoke({"question": item["question"]}))["answer"]


if __name__ == "__main__":
    import sys

    from .common import main_for

    main_for(sys.modules[__name__])
