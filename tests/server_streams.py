"""Two streams of one answer from the real vLLM server, compared as stock's own runs can differ.

vLLM's API server merges a request's pending deltas into one event when its engine gets ahead of it
(``vllm/v1/engine/output_processor.py``, ``RequestOutputCollector.put``: "RequestOutputs are merged if
the producer gets ahead of the consumer"). So where a stream is cut depends on the server's load, in
stock's stream as much as in Ayo's: on this 2-core machine two runs of one 256-token request have
differed by one pair of tokens sent as one chunk (docs/observability.md). A stream is compared as the
same text cut at the same places, but for the few places where one side's server sent two tokens as
one event.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate


def cuts(chunks: Sequence[str]) -> set[int]:
    """Where a stream of text chunks is cut: the offsets its chunks end at."""
    return set(accumulate(len(c) for c in chunks))


def merged_events_allowed(chunks: Sequence[str]) -> int:
    """The cuts one side may lack: one in 50 (a loaded server merges rarely), and at least two."""
    return max(2, len(chunks) // 50)


def assert_same_stream(got: Sequence[str], want: Sequence[str]) -> None:
    """``got`` is ``want``'s text, cut at ``want``'s places but for a few server-merged events."""
    assert "".join(got) == "".join(want)
    if list(got) == list(want):
        return
    differ = cuts(got) ^ cuts(want)
    assert len(differ) <= merged_events_allowed(want), (
        f"the streams are cut at {len(differ)} different places (more than a server's merged events explain): "
        f"{sorted(differ)[:10]}; got {list(got)[:20]}..., want {list(want)[:20]}...")
