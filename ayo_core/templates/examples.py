"""Worked-example graphs built from the templates, for tests, benchmarks and planning.

The prompt hooks here are tiny stand-ins (adapters pass the frameworks' own
prompt code); every prompt starts with a tag (``[expand]``, ``[rerank]``,
``[qa]``, ``[refine]``, ``[summary]``, ``[plan]``) so :func:`example_responder`
can answer it deterministically on the fake LLM. Use with
``fake_engines(scale, responder=example_responder)``.
"""

from __future__ import annotations

import zlib
from typing import Any

from ayo_core.graph import Graph, Node, Op
from ayo_core.runtime.context import Expand
from ayo_core.templates.llm import LLMCall, QueryExpansion, Rerank
from ayo_core.templates.local import Transform
from ayo_core.templates.retrieval import Indexing, Retrieval
from ayo_core.templates.synthesis import Synthesis, greedy_pack

_VOCAB = ("cache memory kernel batch prefix decode prefill token graph node engine vector search index chunk "
          "latency throughput queue policy schedule stream query answer model layer attention gpu cpu thread "
          "pipeline stage split merge embed rerank refine summary tree context window prompt template").split()


def example_documents(n: int = 48, words: int = 60, seed: int = 0) -> list[str]:
    """``n`` deterministic pseudo-documents of ``words`` words from a small vocabulary."""
    docs = []
    for i in range(n):
        h = zlib.crc32(f"{seed}:{i}".encode())
        docs.append(f"doc{i} " + " ".join(_VOCAB[(h // (j + 1) + 7 * j * i) % len(_VOCAB)] for j in range(words)))
    return docs


def _words(seed: str, n: int) -> str:
    h = zlib.crc32(seed.encode())
    return " ".join(_VOCAB[(h + 13 * j) % len(_VOCAB)] for j in range(n))


def example_responder(prompt: str, max_tokens: int) -> str:
    """Deterministic answers for the example prompts (see the module docstring)."""
    if prompt.startswith("[expand"):
        n = int(prompt.split("n=", 1)[1].split("]", 1)[0])
        return "\n".join(f"{i + 1}. {_words(prompt + str(i), 9)}" for i in range(n))
    if prompt.startswith("[rerank"):
        n = int(prompt.split("n=", 1)[1].split("]", 1)[0])
        h = zlib.crc32(prompt.encode())
        return " ".join(str((h >> (3 * i)) % 10) for i in range(n))
    if prompt.startswith("[plan"):
        n = 1 + zlib.crc32(prompt.encode()) % 3
        return "\n".join(f"- {_words(prompt + str(i), 4)}" for i in range(n))
    return _words(prompt, max_tokens)


def parse_lines(text: str) -> list[str]:
    """Numbered or bulleted lines -> their text (empty lines dropped)."""
    out = []
    for line in text.split("\n"):
        line = line.strip().lstrip("-").strip()
        if line[:1].isdigit() and "." in line[:4]:
            line = line.split(".", 1)[1].strip()
        if line:
            out.append(line)
    return out


def _expand_prompt(query: str, n: int = 3) -> str:
    return f"[expand n={n}] Generate {n} search queries, one per line, related to: {query}\nQueries:\n"


def _rerank_prompt(query: str, texts: list[str]) -> str:
    docs = "\n".join(f"Document {i + 1}: {t}" for i, t in enumerate(texts))
    return f"[rerank n={len(texts)}] Score each document's relevance to the question from 0 to 9.\n{docs}\n" \
           f"Question: {query}\nScores:"


def _rerank_parse(text: str, batch: list[Any]) -> list[tuple[Any, float]]:
    scores = [float(s) for s in text.split()[:len(batch)]]
    return list(zip(batch, scores + [0.0] * (len(batch) - len(scores)), strict=True))


def _qa(question: str, context: str) -> str:
    return f"[qa] Answer the question using only the context.\nQuestion: {question}\nContext: {context}\nAnswer:"


def _qa_prefix(question: str) -> str:
    return f"[qa] Answer the question using only the context.\nQuestion: {question}\nContext:"


def _refine(question: str, answer: str, context: str) -> str:
    return f"[refine] Refine the answer with the new context.\nQuestion: {question}\nExisting answer: {answer}\n" \
           f"New context: {context}\nRefined answer:"


def _refine_prefix(question: str) -> str:
    return f"[refine] Refine the answer with the new context.\nQuestion: {question}\nExisting answer:"


def _summary(question: str, context: str) -> str:
    return f"[summary] Summarize the context to answer the question.\nQuestion: {question}\nContext: {context}\nSummary:"


def naive_rag_graph(query_id: str = "q", n_chunks: int = 16, k: int = 4, max_tokens: int = 24) -> Graph:
    """Index uploaded documents, retrieve, one QA call (stock order as ``after`` edges)."""
    g = Graph(query_id)
    q, docs = g.input("question"), g.input("documents")
    idx = Indexing("docs", n_chunks=n_chunks).build(g, "index", {"chunks": docs})
    ret = Retrieval("docs", k=k).build(g, "retrieve", {"query": q}, after=[idx])
    syn = Synthesis("simple", _qa, prefix_qa=_qa_prefix, max_tokens=max_tokens).build(
        g, "synth", {"question": q, "chunks": ret}, after=[ret])
    g.output(syn)
    return g


def advanced_rag_graph(query_id: str = "q", n_chunks: int = 48, k: int = 4, n_queries: int = 3, top_n: int = 3,
                       rerank_batch: int = 4, max_tokens: int = 24, refine_steps: int | None = None) -> Graph:
    """The paper's worked example: indexing, query expansion, retrieval per expanded query, LLM rerank,
    refine synthesis; every module after the previous one (the stock order)."""
    g = Graph(query_id)
    q, docs = g.input("question"), g.input("documents")
    idx = Indexing("docs", n_chunks=n_chunks).build(g, "index", {"chunks": docs})
    exp = QueryExpansion(n_queries, lambda query: _expand_prompt(query, n_queries), parse_lines,
                         max_tokens=12 * n_queries).build(g, "expand", {"query": q}, after=[idx])
    ret = Retrieval("docs", k=k, per_part=True).build(g, "retrieve", {"query": exp}, after=[exp])
    rr = Rerank(top_n, "llm", batch_size=rerank_batch, render=_rerank_prompt, parse=_rerank_parse,
                max_tokens=rerank_batch + 2).build(g, "rerank", {"query": q, "hits": ret}, after=[ret])
    syn = Synthesis("refine", _qa, render_refine=_refine, n_steps=refine_steps or top_n, prefix_qa=_qa_prefix,
                    prefix_refine=_refine_prefix, max_tokens=max_tokens).build(
        g, "synth", {"question": q, "chunks": rr}, after=[rr])
    g.output(syn)
    return g


def tree_summarize_graph(query_id: str = "q", n_chunks: int = 16, k: int = 8, pack_chars: int = 900,
                         max_tokens: int = 24) -> Graph:
    """Retrieval then tree_summarize: leaf summaries in parallel, upper levels grown at run time."""
    g = Graph(query_id)
    q, docs = g.input("question"), g.input("documents")
    idx = Indexing("docs", n_chunks=n_chunks).build(g, "index", {"chunks": docs})
    ret = Retrieval("docs", k=k).build(g, "retrieve", {"query": q}, after=[idx])
    syn = Synthesis("tree_summarize", _qa, render_summary=_summary, prefix_qa=_qa_prefix, max_tokens=max_tokens,
                    pack=lambda question, texts: greedy_pack(texts, pack_chars)).build(
        g, "synth", {"question": q, "chunks": ret}, after=[ret])
    g.output(syn)
    return g


class _PlanRetrievals:
    """Grows one retrieval per planned sub-question, then a merge: the dynamic part of the graph."""

    def __init__(self, collection: str, k: int):
        self.collection, self.k = collection, k

    def __call__(self, ctx: Any, plan: list[str]) -> Expand:
        sub = Graph(ctx.query_id)
        outs = []
        for i, _ in enumerate(plan):
            sub.add(Node(f"sub{i}", Op.TRANSFORM, fn=lambda c, plan, i=i: plan[i], inputs={"plan": ctx.node.inputs["plan"]},
                         meta={"resources": frozenset()}))
            outs.append(Retrieval(self.collection, self.k).build(sub, f"sub{i}.retrieve", {"query": f"sub{i}"}))
        sub.add(Node("sub.merge", Op.AGGREGATE, fn=lambda c, **hits: [h for i in range(len(hits)) for h in hits[f"h{i}"]],
                     inputs={f"h{i}": o for i, o in enumerate(outs)}, meta={"resources": frozenset()}))
        return Expand(list(sub.nodes.values()), "sub.merge")


def dynamic_graph(query_id: str = "q", n_chunks: int = 16, k: int = 2, max_tokens: int = 16) -> Graph:
    """A planner decode whose parsed output decides how many retrievals follow (grown with Expand)."""
    g = Graph(query_id)
    q, docs = g.input("question"), g.input("documents")
    idx = Indexing("docs", n_chunks=n_chunks).build(g, "index", {"chunks": docs})
    plan = LLMCall(lambda question: f"[plan] Split into sub-questions: {question}\n", "planner", max_tokens=32,
                   parse=parse_lines).build(g, "plan", {"question": q}, after=[idx])
    # The expansion searches "docs": declaring it keeps the grow node ordered after the ingest.
    Transform(_PlanRetrievals("docs", k), "planner", takes_ctx=True, resources={"vector:docs"}).build(
        g, "grow", {"plan": plan}, after=[plan])
    syn = Synthesis("compact", _qa, render_refine=_refine, max_tokens=max_tokens).build(
        g, "synth", {"question": q, "chunks": "grow"}, after=["grow"])
    g.output(syn)
    return g


EXAMPLES = {"naive_rag": naive_rag_graph, "advanced_rag": advanced_rag_graph, "tree_summarize": tree_summarize_graph,
            "dynamic": dynamic_graph}


def example_inputs(question: str = "how does prefix caching reduce prefill latency", n_chunks: int = 48) -> dict:
    return {"question": question, "documents": example_documents(n_chunks)}
