"""``ayo compare APP --deployment PROFILE``: stock vs Ayo on an emulated deployment (``ayo emulate``).

Both apps reach the LLM *and* their embeddings through the emulator (the apps are built with the
frameworks' own OpenAI-compatible embedding classes at its URL), the same deployment for both
sides. Per app, first a *record pass*: every question once per side, untimed, with every request the store
cannot answer sent to the real vLLM server and the real embedding model and its answer stored
(replay mode with the real engines as upstream: what earlier runs recorded is not asked again);
then the timed pairs in replay mode, where the same answers come back token for token on the
profile's clock.
A request that the record pass did not see (timing-dependent work, such as a speculation kept in
one run and not in another) is proxied to the real engines and counted: the results file says how
many. ``--emulator-mode proxy`` keeps record mode for the timed pairs too: the real engines in real
time through the same endpoints, which is what an emulated run is validated against.

Every figure from such a run is emulated: the results file carries ``deployment`` (the profile's
name, kind, file and content hash) and its name ends with the profile's name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ayo_core.emulate.process import EmulatorProcess
from ayo_core.emulate.profile import Profile, load_profile
from ayo_core.models import ayo_home, embedding_model_path

log = logging.getLogger("ayo.compare.deployment")


class Deployment:
    """A running emulated deployment: its profile, the emulator process and its mode for timed runs."""

    def __init__(self, profile: Profile, emulator: EmulatorProcess, timed_mode: str) -> None:
        self.profile, self.emulator, self.timed_mode = profile, emulator, timed_mode

    def describe(self) -> dict[str, Any]:
        return {**self.profile.describe(), "emulated": self.timed_mode == "replay", "timed_mode": self.timed_mode,
                "device": self.profile.device}

    async def record_pass(self, pair: Any, questions: list[dict[str, Any]]) -> dict[str, Any]:
        """Every question once per side (untimed), misses recorded from the real engines: the answers the
        timed replay will serve."""
        sides = ["stock"] + (["ayo"] if pair.ayo is not None else [])
        failures = 0
        with self.recording() as before:
            for item in questions:
                for side in sides:
                    try:
                        await pair.cold_cache()
                        await pair.timed(side, item)
                    except Exception as exc:  # reported, and the timed pass will show it again
                        failures += 1
                        log.error("%s %s failed in the record pass on %s: %r", pair.name, side, item["id"], exc)
        return {"record_pass_failures": failures, "recorded_in_record_pass": before["misses_proxied"],
                "stats_before_timed": before}

    @contextmanager
    def recording(self) -> Iterator[dict[str, Any]]:
        """While inside: replay with the real engines as upstream (what the store lacks is recorded); on
        leaving, the timed mode, and the yielded dict gets the emulator's counters from before the timed pass."""
        self.emulator.set_mode("replay")
        before: dict[str, Any] = {}
        yield before
        before.update(self.emulator.set_mode(self.timed_mode))

    def misses_since(self, before: dict[str, Any]) -> dict[str, int]:
        now = self.emulator.stats()
        return {k: now[k] - before.get(k, 0) for k in ("replayed", "misses_proxied", "misses_failed", "recorded")}


@contextmanager
def emulated_deployment(profile_name: str, llm_url: str, model: str, timed_mode: str = "replay") -> Iterator[Deployment]:
    """The emulator in front of the real engines at ``llm_url``, its store under ``$AYO_HOME/emulate``."""
    if timed_mode not in ("replay", "proxy"):
        raise ValueError(f"--emulator-mode must be replay or proxy, not {timed_mode!r}")
    profile = load_profile(profile_name)
    store = ayo_home() / "emulate" / f"answers-{model}.jsonl"
    store.parent.mkdir(parents=True, exist_ok=True)
    with EmulatorProcess(profile_name, store, mode="record", upstream=llm_url, embed_model=str(embedding_model_path()),
                         served_model=model) as emulator:
        yield Deployment(profile, emulator, "record" if timed_mode == "proxy" else "replay")
