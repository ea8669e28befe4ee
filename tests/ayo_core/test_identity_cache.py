"""IdentityLRU: the bounded per-object cache the adapters keep their run-time captures in."""

from __future__ import annotations

from typing import Any

import pytest

from ayo_core.identity_cache import IdentityLRU


class Thing:
    """Equal by value (as pydantic runnables are): the cache must tell two of them apart."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Thing) and other.name == self.name

    __hash__ = None  # type: ignore[assignment]  # unhashable, like many framework objects


def counting_build() -> tuple[list[Any], Any]:
    built: list[Any] = []

    def build(obj: Any) -> str:
        built.append(obj)
        return f"value of {obj.name} #{len(built)}"

    return built, build


def test_a_hit_is_by_identity() -> None:
    cache: IdentityLRU[str] = IdentityLRU(4)
    built, build = counting_build()
    a = Thing("a")
    first = cache.get(a, build)
    assert cache.get(a, build) is first and built == [a]


def test_an_equal_but_different_object_misses() -> None:
    cache: IdentityLRU[str] = IdentityLRU(4)
    built, build = counting_build()
    a, twin = Thing("a"), Thing("a")
    assert a == twin
    assert cache.get(a, build) != cache.get(twin, build)
    assert len(built) == 2 and built[0] is a and built[1] is twin and len(cache) == 2


def test_the_least_recently_used_goes_past_maxsize_with_the_callback() -> None:
    evicted: list[tuple[Any, str]] = []
    cache: IdentityLRU[str] = IdentityLRU(2, on_evict=lambda obj, value: evicted.append((obj, value)))
    _, build = counting_build()
    a, b, c = Thing("a"), Thing("b"), Thing("c")
    va = cache.get(a, build)
    vb = cache.get(b, build)
    cache.get(a, build)  # a is now the most recently used: b goes next
    vc = cache.get(c, build)
    assert evicted == [(b, vb)] and len(cache) == 2
    assert cache.values() == [va, vc]  # least recently used first
    cache.get(b, build)  # b is built again; a, least recently used, goes
    assert [obj for obj, _ in evicted] == [b, a]


def test_entries_hold_their_objects() -> None:
    cache: IdentityLRU[str] = IdentityLRU(8)
    _, build = counting_build()
    for _ in range(3):  # temporaries: without the cache holding them, CPython would reuse one id
        cache.get(Thing("t"), build)
    assert len(cache) == 3  # each kept object stays alive, so no id was reused across them


def test_a_failed_build_keeps_nothing() -> None:
    cache: IdentityLRU[str] = IdentityLRU(2)

    def fail(_obj: Any) -> str:
        raise RuntimeError("capture failed")

    with pytest.raises(RuntimeError):
        cache.get(Thing("a"), fail)
    assert len(cache) == 0


def test_maxsize_zero_keeps_nothing_but_returns_the_value() -> None:
    cache: IdentityLRU[str] = IdentityLRU(0)
    _, build = counting_build()
    assert cache.get(Thing("a"), build) == "value of a #1" and len(cache) == 0
