"""The committed question files: 30 per app, answerable from the corpus, regenerable."""

from __future__ import annotations

import json

import pytest

from ayo_examples.corpus import build_documents
from ayo_examples.data import make_questions


@pytest.fixture(scope="module")
def docs() -> list[dict[str, str]]:
    return build_documents()


@pytest.mark.parametrize("app", list(make_questions.APPS))
def test_question_file_matches_generator(app: str, docs: list[dict[str, str]]) -> None:
    path = make_questions.DATA_DIR / f"{app}.json"
    assert path.read_text(encoding="utf-8") == make_questions.render(app, docs), (
        f"{path} is stale: run `python -m examples.data.make_questions`"
    )


@pytest.mark.parametrize("app", list(make_questions.APPS))
def test_questions_are_answerable_from_the_corpus(app: str, docs: list[dict[str, str]]) -> None:
    ids = {d["id"] for d in docs}
    items = json.loads((make_questions.DATA_DIR / f"{app}.json").read_text())["questions"]
    assert len(items) == 30
    assert len({q["id"] for q in items}) == 30
    for q in items:
        assert q["target"] in ids
        assert set(q.get("docs", [])) <= ids
        if "docs" in q:
            assert q["docs"][0] == q["target"] and len(set(q["docs"])) == len(q["docs"])
    if app not in ("search_augmented", "agent"):
        assert all(q["target"] in q["question"] for q in items)
