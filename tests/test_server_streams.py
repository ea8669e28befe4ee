"""The real-server stream comparison: a server's merged events pass, anything else fails."""

from __future__ import annotations

import pytest

from tests.server_streams import assert_same_stream, cuts


def test_cuts_are_where_the_chunks_end() -> None:
    assert cuts(["ab", "c", "de"]) == {2, 3, 5}


def test_the_same_stream_passes() -> None:
    assert_same_stream(["a", " b", " c"], ["a", " b", " c"])


def test_one_merged_pair_on_either_side_passes() -> None:
    want = [f" t{i}" for i in range(60)]
    got = want[:10] + [want[10] + want[11]] + want[12:]
    assert_same_stream(got, want)
    assert_same_stream(want, got)


def test_another_text_fails() -> None:
    with pytest.raises(AssertionError):
        assert_same_stream(["a", " b"], ["a", " c"])


def test_a_stream_cut_elsewhere_throughout_fails() -> None:
    want = [f" t{i}" for i in range(60)]
    pairs = ["".join(want[i:i + 2]) for i in range(0, 60, 2)]  # every other cut missing: not a server's merge
    with pytest.raises(AssertionError, match="different places"):
        assert_same_stream(pairs, want)
