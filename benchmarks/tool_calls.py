"""How reliably the served model writes tool calls: one-step questions, search + calculator tools.

    python benchmarks/tool_calls.py --url http://127.0.0.1:8765/v1 [--tool-choice auto|required]

Prints, per question, the tool calls the server parsed (or the start of the prose answer), then how
many questions got a tool call and how many of those calls have arguments that follow the tool's
schema (the required keys, nothing else). Greedy decoding, so a run is reproducible.
"""

from __future__ import annotations

import argparse
import json

import httpx

TOOLS = [
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web for a query",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]
QUESTIONS = [
    "What is 12 times 7?", "What is 345 plus 678?", "Search for the capital of France.",
    "What is 2 to the power of 10?", "Look up who wrote Hamlet.", "Compute 81 divided by 9.",
    "What is 15% of 200?", "Search the web for Python asyncio tutorials.",
]


def follows_schema(call: dict) -> bool:
    """The call names a tool and its arguments are a JSON object with exactly the tool's keys."""
    tool = next((t["function"] for t in TOOLS if t["function"]["name"] == call["function"]["name"]), None)
    try:
        args = json.loads(call["function"]["arguments"])
    except json.JSONDecodeError:
        return False
    return tool is not None and isinstance(args, dict) and set(args) == set(tool["parameters"]["required"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8765/v1")
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--tool-choice", default="auto")
    parser.add_argument("--max-tokens", type=int, default=80)
    args = parser.parse_args()
    called = schema_true = 0
    for question in QUESTIONS:
        body = {"model": args.model, "messages": [{"role": "user", "content": question}], "tools": TOOLS,
                "tool_choice": args.tool_choice, "temperature": 0, "max_tokens": args.max_tokens}
        message = httpx.post(f"{args.url}/chat/completions", json=body, timeout=300).json()["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        called += bool(calls)
        schema_true += bool(calls) and all(follows_schema(c) for c in calls)
        shown = [(c["function"]["name"], c["function"]["arguments"]) for c in calls] or repr(message["content"])[:80]
        print(f"{question!r} -> {shown}")
    print(f"tool_choice={args.tool_choice}: {called}/{len(QUESTIONS)} wrote a tool call, "
          f"{schema_true}/{len(QUESTIONS)} with arguments that follow the tool's schema")


if __name__ == "__main__":
    main()
