"""Write the question files ``examples/data/APP.json`` (30 questions per app), deterministically.

Questions are made from the corpus (``ayo_examples.corpus``), never by hand and never by
a model, so they are answerable from it and the same on every machine with the same
Python: targets are picked by a fixed stride over the sorted candidate documents,
phrasings cycle through fixed templates.

* Document-QA apps (naive_rag, advanced_rag, contextual_retrieval) get ``docs``: the
  target's id plus neighbours from the same module (the documents the question
  comes with, as in a "chat with these files" app).
* search_augmented questions describe what a function does, so the app must search.
* agent questions need a search and a small calculation.
* graph questions have several aspects (what, arguments, when), answered apart and merged.

Run ``python -m examples.data.make_questions`` after a corpus change; the test
``tests/examples/test_questions.py`` checks the committed files match.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..corpus import load_corpus

DATA_DIR = Path(__file__).resolve().parent
QUESTIONS_PER_APP = 30
# app -> (stride offset, number of documents that come with each question)
APPS: dict[str, tuple[int, int]] = {
    "naive_rag": (0, 3),
    "advanced_rag": (1, 4),
    "contextual_retrieval": (2, 2),
    "search_augmented": (3, 0),
    "agent": (4, 0),
    "graph": (5, 0),
    "chat": (5, 3),
}
# chat: each item is a 3-turn conversation, the question then follow-ups that need the history
CHAT_FOLLOW_UPS = ("What arguments does it take?", "When should I use it rather than {other}?")
DOC_QA_TEMPLATES = (
    "What does {name} do?",
    "What arguments does {name} take?",
    "What does {name} return?",
    "When should I use {name}?",
    "Explain {name} briefly.",
)
CLASS_TEMPLATES = (
    "What is {name} for?",
    "How do I use {name}?",
    "Explain {name} briefly.",
)
SEARCH_TEMPLATES = (
    "Which Python standard library function or class does this: {summary}",
    "In the Python standard library, what can I use to do the following? {summary}",
)
AGENT_TEMPLATE = "Look up {name} in the Python docs and say what it does, then compute {a} * {b}."
GRAPH_TEMPLATE = "What does {name} do, what does it take, and when should I use it?"


def summary(doc: dict[str, str]) -> str:
    """First paragraph after the signature, on one line."""
    parts = doc["text"].split("\n\n", 2)
    return " ".join(parts[1].split()) if len(parts) > 1 else ""


def candidates(docs: list[dict[str, str]]) -> list[dict[str, str]]:
    """Member documents with enough text and a one-sentence-ish summary, in corpus order."""
    out = []
    for d in docs:
        s = summary(d)
        if "." in d["id"] and len(d["text"]) >= 250 and 20 <= len(s) <= 160 and not s.startswith(d["id"].split(".")[-1]):
            out.append(d)
    return out


def companions(docs: list[dict[str, str]], target: dict[str, str], count: int) -> list[str]:
    """``target`` and its ``count - 1`` nearest corpus neighbours (same module first)."""
    if count == 0:
        return []
    ids = [d["id"] for d in docs]
    i = ids.index(target["id"])
    module = target["id"].rsplit(".", 1)[0]
    same = [x for x in ids if x != target["id"] and x.rsplit(".", 1)[0] == module]
    ordered = sorted(same, key=lambda x: abs(ids.index(x) - i))
    others = sorted((x for x in ids if x != target["id"] and x not in same), key=lambda x: abs(ids.index(x) - i))
    return [target["id"], *(ordered + others)[: count - 1]]


def make_app_questions(app: str, docs: list[dict[str, str]]) -> list[dict[str, object]]:
    offset, ndocs = APPS[app]
    pool = candidates(docs)
    step = len(pool) // QUESTIONS_PER_APP
    picked = [pool[(offset + k * step) % len(pool)] for k in range(QUESTIONS_PER_APP)]
    questions: list[dict[str, object]] = []
    for k, doc in enumerate(picked):
        name = doc["id"]
        if app == "search_augmented":
            text = SEARCH_TEMPLATES[k % len(SEARCH_TEMPLATES)].format(summary=summary(doc))
        elif app == "agent":
            text = AGENT_TEMPLATE.format(name=name, a=12 + k, b=3 + k % 7)
        elif app == "graph":
            text = GRAPH_TEMPLATE.format(name=name)
        else:
            templates = CLASS_TEMPLATES if doc["text"].startswith("class ") else DOC_QA_TEMPLATES
            text = templates[k % len(templates)].format(name=name)
        item: dict[str, object] = {"id": f"{app}-{k + 1:02d}", "question": text, "target": name}
        if ndocs:
            item["docs"] = companions(docs, doc, ndocs)
        if app == "chat":
            other = item["docs"][1] if len(item["docs"]) > 1 else name  # type: ignore[index]
            item["turns"] = [text, *(t.format(other=other) for t in CHAT_FOLLOW_UPS)]
        questions.append(item)
    return questions


def render(app: str, docs: list[dict[str, str]]) -> str:
    body = {
        "app": app,
        "source": "Python standard library docstrings (ayo_examples.corpus); generated by examples/data/make_questions.py",
        "questions": make_app_questions(app, docs),
    }
    return json.dumps(body, indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    docs = load_corpus()
    for app in APPS:
        (DATA_DIR / f"{app}.json").write_text(render(app, docs), encoding="utf-8")


if __name__ == "__main__":
    main()
