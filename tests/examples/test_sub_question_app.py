"""The sub_question app's question file: regenerable, answerable from its three topic indexes."""

from __future__ import annotations

import json

from ayo_examples import sub_question
from ayo_examples.corpus import build_documents
from ayo_examples.data.make_questions import DATA_DIR


def test_question_file_matches_generator() -> None:
    path = DATA_DIR / "sub_question.json"
    assert path.read_text(encoding="utf-8") == sub_question.render_questions(), (
        f"{path} is stale: run `python -m examples.sub_question --write-questions`")


def test_each_question_spans_two_topics_answerable_from_their_indexes() -> None:
    ids = {d["id"] for d in build_documents()}
    topics = {name: {d["id"] for d in docs} for name, docs in sub_question.topic_documents().items()}
    items = json.loads((DATA_DIR / "sub_question.json").read_text())["questions"]
    assert len(items) == 30 and len({q["id"] for q in items}) == 30
    for q in items:
        assert len(set(q["tools"])) == 2
        for target, tool in zip(q["targets"], q["tools"], strict=True):
            assert target in ids and target in topics[tool] and target in q["question"]


def test_schema_names_exactly_the_tools() -> None:
    schema = sub_question.sub_question_schema()
    assert schema["properties"]["items"]["items"]["properties"]["tool_name"]["enum"] == list(sub_question.TOPICS)
