"""agent — LangChain v1: ``create_agent`` with a web-search tool and a calculator.

LangChain v1's agent (``langchain.agents.create_agent``, a LangGraph graph): the chat model is
called with the tools bound; when its message has tool calls, LangGraph's ``ToolNode`` runs them
(concurrently) and the model goes again with their results, until it answers without a tool
call. How many model and tool calls a question takes is only known while it runs. The search
tool calls the loopback search service (``ayo_examples.search_service``). Tool calling needs a
server that parses tool calls (``ayo serve --tool-calling``: a tool-aware chat template and
vLLM's hermes parser); the app uses ``$AYO_TOOLS_LLM_URL`` when set, else the app's LLM URL.
Stock LangChain code; the optimized app is the same agent after one line:
``ayo_langchain.optimize(agent)``.

    python -m examples.agent            # stock, first question
    python -m examples.agent --ayo      # optimized
"""

from __future__ import annotations

import ast
import operator
import os
from typing import Any

import httpx
from langchain.agents import create_agent
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI

from .common import EnginesConfig, answer_text

FRAMEWORK = "langchain"

SYSTEM_PROMPT = (
    "You answer questions about Python's standard library. You have two tools: search (looks a name up in "
    "the Python docs) and calculator (does arithmetic). Call them when the question needs them, then answer "
    "in one or two sentences using their results."
)
RECURSION_LIMIT = 8  # model -> tools -> model ... : at most 3 model calls and their tool calls

_OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.USub: operator.neg,
}


def calculate(expression: str) -> str:
    """Evaluate plain arithmetic (numbers, + - * / // % **, parentheses); never runs code."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        raise ValueError("not plain arithmetic")

    try:
        return str(value(ast.parse(expression.strip().strip("`'\""), mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as exc:
        return f"Could not calculate {expression!r}: {exc}"


def make_search_tool(url: str, k: int = 1) -> Any:
    def to_text(payload: dict[str, Any]) -> str:
        return "\n".join(f"[{r['title']}] {r['text'][:200]}" for r in payload["results"]) or "No results."

    def search(query: str) -> str:
        """Look a name up in the Python documentation (a short query like json.loads)."""
        return to_text(httpx.get(f"{url}/search", params={"q": query, "k": k}, timeout=30).json())

    async def asearch(query: str) -> str:
        async with httpx.AsyncClient(timeout=30) as client:
            return to_text((await client.get(f"{url}/search", params={"q": query, "k": k})).json())

    return StructuredTool.from_function(func=search, coroutine=asearch, name="search")


def calculator(expression: str) -> str:
    """Do arithmetic on an expression like 12 * 7."""
    return calculate(expression)


def tools_llm_url(cfg: EnginesConfig) -> str:
    """The tool-calling server: ``$AYO_TOOLS_LLM_URL`` (``ayo serve --tool-calling``), else the app's."""
    return os.environ.get("AYO_TOOLS_LLM_URL") or cfg.llm_url


def build_stock(cfg: EnginesConfig) -> Any:
    llm = ChatOpenAI(model=cfg.model, base_url=tools_llm_url(cfg), api_key="unused", temperature=0.0,
                     max_tokens=cfg.max_tokens)
    if not cfg.search_url:
        raise ValueError("agent needs EnginesConfig.search_url: start ayo_examples.search_service.SearchService")
    tools = [make_search_tool(cfg.search_url), StructuredTool.from_function(calculator)]
    return create_agent(llm, tools, system_prompt=SYSTEM_PROMPT).with_config(recursion_limit=RECURSION_LIMIT)


def build_optimized(cfg: EnginesConfig) -> Any:
    import ayo_langchain

    return ayo_langchain.optimize(build_stock(cfg))


def final_answer(state: dict[str, Any]) -> str:
    """The agent's answer: the last message's text (the model's reply without tool calls)."""
    return answer_text(state["messages"][-1].content)


def loop_outcome(state: dict[str, Any]) -> dict[str, Any]:
    """How the loop went: model calls, tool calls (valid ones: a known tool whose arguments it accepted),
    and whether it ended with an answer (a last model message with text and no tool call)."""
    ai = [m for m in state["messages"] if m.type == "ai"]
    tool_msgs = [m for m in state["messages"] if m.type == "tool"]
    last = state["messages"][-1]
    return {"model_calls": len(ai), "tool_calls": sum(len(m.tool_calls) for m in ai),
            "valid_tool_calls": sum(getattr(m, "status", "success") != "error" for m in tool_msgs),
            "answered": last.type == "ai" and not last.tool_calls and bool(str(last.content).strip())}


def run(app: Any, item: dict[str, Any]) -> str:
    return final_answer(app.invoke({"messages": [("user", item["question"])]}))


async def arun(app: Any, item: dict[str, Any]) -> str:
    return final_answer(await app.ainvoke({"messages": [("user", item["question"])]}))


if __name__ == "__main__":
    import sys

    from .common import main_for

    main_for(sys.modules[__name__])
