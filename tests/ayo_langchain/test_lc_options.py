"""``optimize(chain, options=Options(...), **knobs)``: the core's one set of knobs, old keywords still working."""

from __future__ import annotations

from langchain_core.runnables import RunnableLambda

import ayo_langchain
from ayo_core.pipeline import Options


def test_options_and_keywords_combine() -> None:
    chain = RunnableLambda(lambda x: x + 1) | RunnableLambda(lambda x: x * 2)
    fast = ayo_langchain.optimize(chain, options=Options(passes=False, timeout=30.0), policy="depth")
    assert ayo_langchain.Options is Options
    assert (fast.options.passes, fast.options.timeout, fast.options.policy) == (False, 30.0, "depth")
    assert fast.invoke(1) == chain.invoke(1) == 4
    assert fast.last_graph is not None and fast.last_graph.meta.get("passes", []) == []
    old = ayo_langchain.optimize(chain, policy="fifo", timeout=5.0)
    assert (old.options.policy, old.options.timeout) == ("fifo", 5.0)
    assert old.batch([1, 2]) == chain.batch([1, 2]) == [4, 6]
    assert len(old.last_traces) == 2 and old.last_trace.status == "done"
