"""Fixtures for the core tests: a virtual clock and fresh fake engines (no real model needed)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ayo_core.runtime.clock import VirtualClock


@pytest.fixture
async def vclock() -> AsyncIterator[VirtualClock]:
    """Runs the test's event loop on virtual time (fake-engine latencies cost no real time)."""
    with VirtualClock() as clock:
        yield clock
