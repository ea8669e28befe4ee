"""agent — LangChain: a ReAct agent with a web-search tool and a calculator.

The classic ReAct loop (``create_react_agent`` + ``AgentExecutor``): the model
thinks, picks a tool, reads the observation, and goes again until it gives a final
answer, so how many model and tool calls a question takes is only known while it
runs. The search tool calls the loopback search service
(``ayo_examples.search_service``). Stock LangChain code; the optimized app is the same
executor after one line: ``ayo_langchain.optimize(agent_executor)``.

    python -m examples.agent            # stock, first question
    python -m examples.agent --ayo      # optimized
"""

from __future__ import annotations

import ast
import operator
from typing import Any

import httpx
from langchain_classic.agents import AgentExecutor, create_react_agent
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import Runnable
from langchain_core.tools import Tool
from langchain_openai import OpenAI

from .common import EnginesConfig, answer_text

FRAMEWORK = "langchain"

REACT_PROMPT = PromptTemplate.from_template(
    """Answer the following questions as best you can. You have access to the following tools:

{tools}

Use the following format:

Question: the input question you must answer
Thought: you should always think about what to do
Action: the action to take, should be one of [{tool_names}]
Action Input: the input to the action
Observation: the result of the action
... (this Thought/Action/Action Input/Observation can repeat N times)
Thought: I now know the final answer
Final Answer: the final answer to the original input question

For example:

Question: Look up json.loads in the Python docs and say what it does, then compute 2 * 21.
Thought: I should search the docs for json.loads.
Action: search
Action Input: json.loads
Observation: [json.loads] Deserialize s (a str, bytes or bytearray instance containing a JSON document) to a Python object.
Thought: Now I compute 2 * 21.
Action: calculator
Action Input: 2 * 21
Observation: 42
Thought: I now know the final answer
Final Answer: json.loads turns a JSON document into a Python object. 2 * 21 = 42.

Begin!

Question: {input}
Thought:{agent_scratchpad}"""
)

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


def make_search_tool(url: str, k: int = 1) -> Tool:
    def to_text(payload: dict[str, Any]) -> str:
        return "\n".join(f"[{r['title']}] {r['text'][:200]}" for r in payload["results"]) or "No results."

    def search(query: str) -> str:
        return to_text(httpx.get(f"{url}/search", params={"q": query, "k": k}, timeout=30).json())

    async def asearch(query: str) -> str:
        async with httpx.AsyncClient(timeout=30) as client:
            return to_text((await client.get(f"{url}/search", params={"q": query, "k": k})).json())

    return Tool(name="search", func=search, coroutine=asearch,
                description="Search the Python documentation. Input: a short search query.")


def build_stock(cfg: EnginesConfig) -> Runnable:
    # The classic ReAct setup: a completion model continues the "Thought:" text.
    llm = OpenAI(model=cfg.model, base_url=cfg.llm_url, api_key="unused", temperature=0.0,
                 max_tokens=cfg.max_tokens)
    if not cfg.search_url:
        raise ValueError("agent needs EnginesConfig.search_url: start ayo_examples.search_service.SearchService")
    tools = [
        make_search_tool(cfg.search_url),
        Tool(name="calculator", func=calculate, description="Do arithmetic. Input: an expression like 12 * 7."),
    ]
    agent = create_react_agent(llm, tools, REACT_PROMPT)
    return AgentExecutor(agent=agent, tools=tools, max_iterations=3, handle_parsing_errors=True)


def build_optimized(cfg: EnginesConfig) -> Runnable:
    import ayo_langchain

    return ayo_langchain.optimize(build_stock(cfg))


def run(app: Any, item: dict[str, Any]) -> str:
    return answer_text(app.invoke({"input": item["question"]}))


async def arun(app: Any, item: dict[str, Any]) -> str:
    return answer_text(await app.ainvoke({"input": item["question"]}))


if __name__ == "__main__":
    import sys

    from .common import main_for

    main_for(sys.modules[__name__])
