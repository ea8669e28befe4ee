"""Rerankers: LLM scoring through the real server, CrossEncoder on a tiny local model."""

from __future__ import annotations

import shutil

import pytest

from ayo_core.engines.llm_client import LLMEngine
from ayo_core.engines.reranker import CrossEncoderReranker, LLMReranker, RerankResult, _ranked, parse_score

PASSAGES = ["Paris is the capital and largest city of France.",
            "Bananas are rich in potassium.",
            "The Eiffel Tower is in Paris."]


@pytest.mark.parametrize(("text", "score"), [("7", 7.0), (" 8/10", 8.0), ("Relevance: 3.5", 3.5),
                                             ("none", 0.0), ("42", 10.0), ("-3", 0.0)])
def test_parse_score(text, score):
    assert parse_score(text) == score


def test_ranking_is_stable_and_cut_to_top_n():
    assert _ranked([1.0, 5.0, 5.0, 0.0], 3) == [RerankResult(1, 5.0), RerankResult(2, 5.0), RerankResult(0, 1.0)]


def test_template_must_have_both_fields():
    with pytest.raises(ValueError, match="{query}"):
        LLMReranker(LLMEngine("http://127.0.0.1:1/v1"), user_template="{passage} only")


def test_query_comes_before_the_passage_so_prompts_share_a_prefix():
    rr = LLMReranker(LLMEngine("http://127.0.0.1:1/v1"))
    a, b = (rr.messages("q?", p)[1]["content"] for p in PASSAGES[:2])
    assert a.startswith("Query: q?") and b.startswith("Query: q?")


@pytest.mark.llm
async def test_llm_reranker_scores_every_passage(llm_url):
    rr = LLMReranker(LLMEngine(llm_url))
    scores = await rr.ascore("What is the capital of France?", PASSAGES)
    assert len(scores) == 3 and all(0.0 <= s <= 10.0 for s in scores)
    ranked = await rr.arerank("What is the capital of France?", PASSAGES, top_n=2)
    assert len(ranked) == 2 and ranked[0].score >= ranked[1].score
    assert ranked == _ranked(scores, 2)  # greedy: same scores run to run
    assert await rr.ascore("q", []) == []


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A randomly initialised one-label BERT with MiniLM's tokenizer: a real CrossEncoder folder, no download."""
    from transformers import AutoConfig, BertForSequenceClassification

    from ayo_core.models import embedding_model_path

    src = embedding_model_path()
    folder = tmp_path_factory.mktemp("cross-encoder")
    config = AutoConfig.from_pretrained(src, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


async def test_cross_encoder_reranker_on_a_local_folder(tiny_cross_encoder):
    rr = CrossEncoderReranker(tiny_cross_encoder)
    scores = rr.score("capital of France?", PASSAGES)
    assert len(scores) == 3 and all(isinstance(s, float) for s in scores)
    assert rr.score("capital of France?", PASSAGES) == scores
    assert await rr.ascore("capital of France?", PASSAGES) == scores
    assert [r.index for r in await rr.arerank("capital of France?", PASSAGES)] == [r.index for r in _ranked(scores, None)]
    assert rr.score("q", []) == []


def test_cross_encoder_needs_a_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no weights are downloaded"):
        CrossEncoderReranker(tmp_path)
