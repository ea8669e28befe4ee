"""EarlyStarts: the core's board of work started before its step asks for it (agents' early tool starts)."""

from __future__ import annotations

import asyncio
import gc

from ayo_core.runtime.early_starts import EarlyStarts


async def _value(v: object, delay: float = 0.0) -> object:
    await asyncio.sleep(delay)
    return v


def test_starts_are_taken_oldest_first_under_their_key() -> None:
    async def main() -> None:
        board = EarlyStarts()
        board.start(("search", "{}"), _value(1), "tool: search", tool="search")
        board.start(("search", "{}"), _value(2), "tool: search", tool="search")
        board.start("other", _value(3), "tool: other", tool="other")
        assert board.untaken == 3 and ("search", "{}") in board and "missing" not in board
        assert await board.take(("search", "{}")) == 1
        assert await board.take(("search", "{}")) == 2
        assert board.take(("search", "{}")) is None and ("search", "{}") not in board
        assert await board.take("other") == 3
        assert board.untaken == 0
        assert [e["tool"] for e in board.log] == ["search", "search", "other"]
        assert all(isinstance(e["started"], float) for e in board.log)

    asyncio.run(main())


def test_beyond_max_untaken_the_oldest_start_is_forgotten_but_still_runs() -> None:
    async def main() -> None:
        board = EarlyStarts(max_untaken=2)
        first = board.start("a", _value("a", 0.01), "tool: a")
        board.start("b", _value("b"), "tool: b")
        board.start("c", _value("c"), "tool: c")
        assert board.untaken == 2 and "a" not in board and board.take("a") is None
        assert await first == "a"  # forgotten, not cancelled
        assert await board.take("b") == "b" and await board.take("c") == "c"

    asyncio.run(main())


def test_a_failed_start_nobody_takes_is_not_reported_as_never_retrieved() -> None:
    reported: list[dict] = []

    async def fails() -> None:
        raise ValueError("tool failed")

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        board = EarlyStarts(max_untaken=1)
        board.start("x", fails(), "tool: x")
        board.start("y", _value("y"), "tool: y")  # forgets x
        await asyncio.sleep(0.01)
        gc.collect()

    asyncio.run(main())
    gc.collect()
    # this start's own error only: the collections above may also finalize another test's leftovers
    assert not [c for c in reported if "never retrieved" in c.get("message", "")
                and str(c.get("exception")) == "tool failed"]


def test_a_taken_start_raises_its_error_where_the_step_awaits_it() -> None:
    async def fails() -> None:
        raise ValueError("tool failed")

    async def main() -> None:
        board = EarlyStarts()
        board.start("x", fails(), "tool: x")
        task = board.take("x")
        try:
            await task
        except ValueError as e:
            return str(e)
        return None

    assert asyncio.run(main()) == "tool failed"
