"""``optimize(..., options=Options(...))``: the core's one set of knobs, old keywords still working."""

from __future__ import annotations

from llama_index.core.query_engine import CustomQueryEngine

import ayo_llamaindex
from ayo_core.pipeline import Options
from ayo_llamaindex.query_engine import OptimizedQueryEngine


class _Echo(CustomQueryEngine):
    def custom_query(self, query_str: str) -> str:
        return f"echo: {query_str}"


def test_options_give_the_policy_and_the_old_keyword_still_works() -> None:
    stock = _Echo()
    by_keyword = ayo_llamaindex.optimize(stock, policy="depth")
    by_options = ayo_llamaindex.optimize(stock, options=Options(policy="depth", timeout=30.0))
    assert isinstance(by_options, OptimizedQueryEngine) and by_options._policy == by_keyword._policy == "depth"
    assert by_options._options.timeout == 30.0
    assert str(by_options.query("hi")) == str(by_keyword.query("hi")) == str(stock.query("hi"))
    assert by_options.last_trace is not None and by_options.last_trace.status == "done"
    # optimized again with options: a new stand-in over the stock engine; same policy, no options: itself
    assert ayo_llamaindex.optimize(by_keyword, policy="depth") is by_keyword
    again = ayo_llamaindex.optimize(by_keyword, options=Options(policy="fifo"))
    assert again is not by_keyword and again.stock is stock and again._policy == "fifo"
