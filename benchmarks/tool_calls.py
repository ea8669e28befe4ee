"""How reliably the served model writes tool calls: one-step questions, search + calculator tools.

    python benchmarks/tool_calls.py --url http://127.0.0.1:8765/v1 [--tool-choice auto required]
    python benchmarks/tool_calls.py --url ... --out benchmarks/results/tool_calls.json   # the committed figures

Prints, per question, the tool calls the server parsed (or the start of the prose answer), then how
many questions got a tool call and how many of those calls have arguments that follow the tool's
schema (the required keys, nothing else). Greedy decoding, so a run is reproducible. The figures, each
question's calls and the run's provenance (``ayo_bench.provenance``: commit, server, machine) go to
``--out`` (default ``$AYO_HOME/results/tool_calls.json``): the README quotes that file.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import httpx

log = logging.getLogger("ayo.tool_calls")

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


def ask(url: str, model: str, question: str, tool_choice: str, max_tokens: int) -> dict[str, Any]:
    """One greedy request with both tools offered: the calls the server parsed and the prose's start."""
    body = {"model": model, "messages": [{"role": "user", "content": question}], "tools": TOOLS,
            "tool_choice": tool_choice, "temperature": 0, "max_tokens": max_tokens}
    message = httpx.post(f"{url}/chat/completions", json=body, timeout=300).json()["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    return {"question": question, "calls": [{"name": c["function"]["name"], "arguments": c["function"]["arguments"],
                                             "follows_schema": follows_schema(c)} for c in calls],
            "content_start": None if calls else (message.get("content") or "")[:80]}


def run_choice(url: str, model: str, tool_choice: str, max_tokens: int) -> dict[str, Any]:
    """Every question under one ``tool_choice``: the counts the README quotes, and the answers."""
    answers = [ask(url, model, q, tool_choice, max_tokens) for q in QUESTIONS]
    for a in answers:
        print(f"{a['question']!r} -> {[(c['name'], c['arguments']) for c in a['calls']] or repr(a['content_start'])}")
    called = sum(bool(a["calls"]) for a in answers)
    schema = sum(bool(a["calls"]) and all(c["follows_schema"] for c in a["calls"]) for a in answers)
    print(f"tool_choice={tool_choice}: {called}/{len(QUESTIONS)} wrote a tool call, "
          f"{schema}/{len(QUESTIONS)} with arguments that follow the tool's schema")
    return {"questions": len(QUESTIONS), "wrote_tool_call": called, "follows_schema": schema, "answers": answers}


def main(argv: list[str] | None = None) -> int:
    from ayo_bench import provenance
    from ayo_core.models import ayo_home

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8765/v1")
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--tool-choice", nargs="+", default=["auto", "required"])
    parser.add_argument("--max-tokens", type=int, default=80)
    parser.add_argument("--out", default=str(ayo_home() / "results" / "tool_calls.json"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    # a server given by URL: its launch flags are unknown (provenance says so)
    result = {"provenance": provenance.collect(args.url, started_by_ayo=False, dtype="float32", outputs=(out,)),
              "model": args.model, "max_tokens": args.max_tokens, "temperature": 0,
              "tools": [t["function"]["name"] for t in TOOLS],
              "by_tool_choice": {c: run_choice(args.url, args.model, c, args.max_tokens) for c in args.tool_choice}}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    log.info("wrote %s", out)
    print(f"wrote {provenance.shown_path(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
