"""streamed_lines: one split of a streamed line-per-query decode, with the frameworks' two parses.

The references below are the three adapter functions as they were written before they called
``streamed_lines``; each call site must give the same result for every input.
"""

from __future__ import annotations

import itertools

import pytest

from ayo_core.runtime.pipelined import streamed_lines


# -- the old bodies, verbatim ---------------------------------------------------------------
def old_li_finished_queries(num_queries: int, text_so_far: str) -> list[str]:
    lines = text_so_far.lstrip("`").split("\n")[:-1]
    done = [q.strip() for q in lines if q.strip()]
    return done[: num_queries - 1]


def old_li_streaming_parts(num_queries: int, text: str) -> list[str]:
    lines = text.lstrip("`").split("\n")
    return old_li_finished_queries(num_queries, text) + [lines[-1]]


def old_lc_line_parts(value: str) -> list[str]:
    segments = value.lstrip().split("\n")
    return [s for s in segments[:-1] if s] + [segments[-1]]


# -- the call sites as they are now ---------------------------------------------------------
def li_finished_queries(num_queries: int, text: str) -> list[str]:  # ayo_llamaindex.retrieval.finished_queries
    return streamed_lines(text, lstrip="`", strip_lines=True)[0][: num_queries - 1]


def li_streaming_parts(num_queries: int, text: str) -> list[str]:  # ayo_llamaindex.lowering's streaming_parts
    finished, growing = streamed_lines(text, lstrip="`", strip_lines=True)
    return [*finished[: num_queries - 1], growing]


def lc_line_parts(text: str) -> list[str]:  # ayo_langchain.retrieval.line_parts on a str
    finished, growing = streamed_lines(text)
    return [*finished, growing]


TRICKY = [
    "", "\n", "\n\n", "a", "a\n", "a\nb", "a\nb\n", "a\n\nb", "a\n  \nb\n", "  a\n b \nc",
    "a\r\nb\r\n", "a\r\n\r\nb", "\r\n", " \n a", "``` \na\n```", "```\na\nb\n``", "`a`\nb`",
    "1. first\n2. second\n3. thi", "1. first\n\n2. second\n", "\t1) one\n\t2) two",
    "   \n\n   leading", "q1\nq2\nq3\nq4\nq5\n", "  ", "``", "`\n`", "a\n\t\n", "a \n b \n c ",
]


def _more() -> list[str]:
    """Every short string over the characters that matter here: a property check by enumeration."""
    alphabet = ["a", " ", "\n", "\r", "`", "\t", "1."]
    return ["".join(p) for n in range(5) for p in itertools.product(alphabet, repeat=n)]


@pytest.mark.parametrize("num_queries", [1, 2, 3, 5])
def test_the_llamaindex_sites_agree_with_their_old_bodies(num_queries: int) -> None:
    for text in TRICKY + _more():
        assert li_finished_queries(num_queries, text) == old_li_finished_queries(num_queries, text), repr(text)
        assert li_streaming_parts(num_queries, text) == old_li_streaming_parts(num_queries, text), repr(text)


def test_the_langchain_site_agrees_with_its_old_body() -> None:
    for text in TRICKY + _more():
        assert lc_line_parts(text) == old_lc_line_parts(text), repr(text)


def test_the_two_parses_differ_where_the_frameworks_do() -> None:
    text = "`` a \n  \n\tb\r\n  c"
    # LlamaIndex: backticks off the start, finished lines stripped, blank ones dropped
    assert streamed_lines(text, lstrip="`", strip_lines=True) == (["a", "b"], "  c")
    # LangChain: whitespace off the start, lines as written, only empty ones dropped
    assert streamed_lines(text) == (["`` a ", "  ", "\tb\r"], "  c")
    assert streamed_lines("  x\n\ny") == (["x"], "y")  # leading whitespace goes with lstrip=None


def test_the_growing_line_is_the_last_segment_as_written() -> None:
    assert streamed_lines("a\n") == (["a"], "")
    assert streamed_lines("a\n b ", strip_lines=True) == (["a"], " b ")
    assert streamed_lines("``partial", lstrip="`") == ([], "partial")
