"""The cluster simulation's query stream: the apps' graph shapes, their documents, and how often
their work repeats (which prefix caching, and so prefix-aware routing, lives on).

Every query indexes its own documents (``docs_per_query`` of them, in a collection of its own)
drawn from a pool of ``doc_pool`` documents: a share ``doc_overlap`` of them is its question's own
set (the same whenever that question is asked again), the rest drawn at random for this query. So
``doc_overlap=1`` with a small pool is the FAQ case (a recurring question re-reads the same
documents), ``doc_overlap=0`` with a large pool is the case where every query brings its own.

:func:`repeat_rates` says what a stream assumes: the share of queries whose question was asked
before, and (:func:`prefix_hit_possible`, from the prompts a run sent) the share of prompt tokens
that an unbounded prefix cache shared by every replica would have found cached: the most any
routing can get from prefix caching.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from ayo_core.runtime.fakes import token_ids
from ayo_core.runtime.stock_runner import SEQUENTIAL, FrameworkConcurrency
from ayo_core.templates.examples import (
    advanced_rag_graph,
    dynamic_graph,
    example_documents,
    naive_rag_graph,
    tree_summarize_graph,
)

DOCS_PER_QUERY = 16
DOC_POOL = 1000
DOC_OVERLAP = 0.5
# How many different questions the stream draws from (a multiple of 5): with 10,000 queries each
# recurs ~4 times, so ~75 % of queries repeat an earlier question (reported with every figure).
DISTINCT_QUESTIONS = 2500
PREFIX_BLOCK = 16  # tokens per prefix-cache block, as the fake replicas cache them

# The mix: (weight, shape, graph builder). Shapes of the apps' graphs (see templates/examples).
MIX: list[tuple[float, str, Callable[[str], Any]]] = [
    (0.4, "naive_rag", lambda q: naive_rag_graph(q, n_chunks=DOCS_PER_QUERY)),
    (0.25, "advanced_rag", lambda q: advanced_rag_graph(q, n_chunks=DOCS_PER_QUERY)),
    (0.15, "tree_summarize", lambda q: tree_summarize_graph(q, n_chunks=DOCS_PER_QUERY)),
    (0.2, "dynamic", lambda q: dynamic_graph(q, n_chunks=DOCS_PER_QUERY)),
]

# What the frameworks run concurrently in each shape (stock at its best settings, use_async=True):
# LlamaIndex's TreeSummarize gathers each level's summaries (asyncio.gather over the packs);
# QueryFusionRetriever(use_async=True) gathers the retrievals of its generated queries (here as two
# gathered waves, every embed then every search); SubQuestionQueryEngine(use_async=True) gathers the
# sub-questions (the planner's grown retrievals). LLMRerank scores its batches one after the other
# and refine is a chain, in the frameworks as here.
STOCK_CONCURRENCY: dict[str, FrameworkConcurrency] = {
    "naive_rag": SEQUENTIAL,
    "advanced_rag": FrameworkConcurrency(parts=("retrieve.embed", "retrieve.search")),
    "tree_summarize": FrameworkConcurrency(parts=("synth*.summarize",)),
    "dynamic": FrameworkConcurrency(expansions=("grow",)),
}


def own_collection(graph: Any, collection: str) -> None:
    """Point the graph's index and searches (and the ones it grows) at ``collection``: a query
    searches only the documents it indexed, so no query's answer depends on another's timing."""
    for node in graph.nodes.values():
        if getattr(node.fn, "collection", None) == "docs":
            node.fn.collection = collection


class DocumentDraw:
    """Each query's documents: its question's own set for ``overlap`` of them, the rest at random."""

    def __init__(self, pool: int, overlap: float, per_query: int = DOCS_PER_QUERY, seed: int = 0):
        if not 0.0 <= overlap <= 1.0:
            raise ValueError(f"doc_overlap must be within [0, 1], not {overlap}")
        if pool < per_query:
            raise ValueError(f"doc_pool ({pool}) must hold at least the {per_query} documents a query indexes")
        self.pool, self.overlap, self.per_query, self.seed = pool, overlap, per_query, seed
        self.texts = example_documents(pool, seed=seed)

    def for_query(self, question: int, rng: random.Random) -> list[str]:
        own = random.Random(f"{self.seed}:{question}").sample(range(self.pool), self.per_query)
        keep = own[:round(self.overlap * self.per_query)]
        rest = [d for d in rng.sample(range(self.pool), 2 * self.per_query) if d not in keep]
        return [self.texts[d] for d in keep + rest[:self.per_query - len(keep)]]


def make_jobs(n: int, seed: int, distinct: int = DISTINCT_QUESTIONS, doc_pool: int = DOC_POOL,
              doc_overlap: float = DOC_OVERLAP) -> list[tuple[Any, dict]]:
    """``n`` queries: a shape from the mix, a question from ``distinct`` ones, their own documents."""
    rng = random.Random(seed)
    weights = [w for w, _, _ in MIX]
    draw = DocumentDraw(doc_pool, doc_overlap)
    jobs = []
    for i in range(n):
        _, shape, build = rng.choices(MIX, weights)[0]
        which = rng.randrange(max(1, distinct // 5)), rng.randrange(5)
        graph = build(f"q{i}")
        graph.shape = shape  # which of the mix's shapes (per-shape latencies, stock's concurrency)
        own_collection(graph, f"docs-{i}")
        docs = draw.for_query(5 * which[0] + which[1], rng)
        jobs.append((graph, {"question": f"question {which[0]} about topic {which[1]}", "documents": docs}))
    return jobs


def question_repeat_share(jobs: list[tuple[Any, dict]]) -> float:
    """Share of queries whose question was asked earlier in the stream."""
    seen: set[str] = set()
    repeats = 0
    for _, inputs in jobs:
        repeats += inputs["question"] in seen
        seen.add(inputs["question"])
    return repeats / len(jobs) if jobs else 0.0


def prefix_hit_possible(prompts: Iterable[str], block: int = PREFIX_BLOCK) -> float:
    """Share of the prompts' tokens in leading blocks some earlier prompt had too: what one unbounded
    prefix cache shared by every replica would have served (prompts in the order they were sent)."""
    seen: set[int] = set()
    total = hit = 0
    for prompt in prompts:
        ids = token_ids(prompt)
        total += len(ids)
        h, matching = 0, True
        for k in range(len(ids) // block):
            h = hash((h, tuple(ids[k * block:(k + 1) * block])))
            if matching and h in seen:
                hit += block
            else:
                matching = False
                seen.add(h)
    return hit / total if total else 0.0
