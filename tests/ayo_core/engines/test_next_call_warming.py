"""NextCallWarms: the core's warm-ups of an agent's next model call (bookkeeping over fake server calls;
the real algorithm against a stub server is tested through the LangChain adapter,
tests/ayo_langchain/test_agent_next_call_warm.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ayo_core.engines import next_call_warming as ncw
from ayo_core.engines.prefix_warming import STAND_INS, WarmBudget


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Fake stand-ins for the server calls: a GPU server (budget), a tokenizer that takes ``delay`` s."""
    seen: dict[str, Any] = {"renders": [], "warmed": [], "delay": 0.0, "budget": WarmBudget(least=32, block_size=16)}

    async def budget(url: str) -> WarmBudget | None:
        return seen["budget"]

    async def prefix(llm: Any, renders: list[dict]) -> list[int]:
        seen["renders"] += renders
        await asyncio.sleep(seen["delay"])
        return list(range(64))

    async def warm(llm: Any, ids: list[int], least: int, block_size: int | None, **cache: Any) -> int:
        seen["warmed"].append((len(ids), cache))
        return len(ids)

    monkeypatch.setattr(ncw, "warm_budget", budget)
    monkeypatch.setattr(ncw, "token_prefix", prefix)
    monkeypatch.setattr(ncw, "warm_ids", warm)
    monkeypatch.setattr(ncw, "get_llm_engine", lambda url, model: (url, model))
    return seen


def _render(stand_in: str) -> dict[str, Any]:
    return {"messages": [{"role": "tool", "content": stand_in}]}


def test_a_warm_up_renders_both_stand_ins_and_sends_the_prefix(fake_server: dict[str, Any]) -> None:
    async def main() -> ncw.NextCallWarms:
        warms = ncw.NextCallWarms()
        warms.start(["call-1", "call-2"], "http://gpu/v1/", "m", _render, {"cache_salt": "s"})
        await asyncio.gather(*warms.tasks)
        warms.next_request_began(["call-1", "call-2"])
        return warms

    warms = asyncio.run(main())
    assert [r["messages"][0]["content"] for r in fake_server["renders"]] == list(STAND_INS)
    assert fake_server["warmed"] == [(64, {"cache_salt": "s"})]
    entry = warms.log[-1]
    assert entry["outcome"] == "warmed" and entry["calls"] == ["call-1", "call-2"] and entry["next_request"]
    assert warms.summary()[0].startswith("64 tokens warmed in ") and "before the next request began" in warms.summary()[0]
    assert not warms.tasks


def test_a_warm_up_still_tokenizing_when_the_next_request_begins_is_cancelled(fake_server: dict[str, Any]) -> None:
    fake_server["delay"] = 5.0

    async def main() -> ncw.NextCallWarms:
        warms = ncw.NextCallWarms()
        warms.start(["call-1"], "http://gpu/v1", "m", _render)
        await asyncio.sleep(0.01)
        warms.next_request_began(["other", "call-1"])
        await asyncio.gather(*warms.tasks, return_exceptions=True)
        return warms

    warms = asyncio.run(main())
    assert warms.log[-1]["outcome"].startswith("cancelled") and not fake_server["warmed"]


def test_the_device_rule_sends_nothing(fake_server: dict[str, Any]) -> None:
    fake_server["budget"] = None

    async def main() -> ncw.NextCallWarms:
        warms = ncw.NextCallWarms()
        warms.start(["call-1"], "http://cpu/v1", "m", _render)
        await asyncio.gather(*warms.tasks)
        return warms

    warms = asyncio.run(main())
    assert warms.summary() == ["not warmed: the device rule (a CPU server, or its prefix cache is off)"]
    assert not fake_server["renders"] and not fake_server["warmed"]


def test_pending_warm_ups_are_bounded(fake_server: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ncw, "MAX_PENDING", 2)

    async def main() -> ncw.NextCallWarms:
        warms = ncw.NextCallWarms()
        for i in range(4):  # their next requests never begin (a tool raised)
            warms.start([f"call-{i}"], "http://gpu/v1", "m", _render)
        await asyncio.gather(*warms.tasks)
        return warms

    warms = asyncio.run(main())
    assert list(warms._pending) == ["call-2", "call-3"] and len(warms.log) == 4
