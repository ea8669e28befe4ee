"""The daemon worker pool of Ayo's background loop and the CPython internals it is declared on."""

from __future__ import annotations

import threading

from ayo_shims import python_runtime, touchpoints


def test_touchpoints_are_declared_for_python_and_hold_here() -> None:
    names = {tp.name for tp in touchpoints.touchpoints("python")}
    assert {"concurrent.futures.thread._worker", "concurrent.futures.thread._WorkItem"} <= names
    for tp in (python_runtime.WORKER_LOOP, python_runtime.WORK_ITEM, python_runtime.POOL_STATE):
        tp.verify()


def test_daemon_pool_runs_work_on_daemon_threads() -> None:
    pool = python_runtime.daemon_pool(4, "ayo-test")
    try:
        assert isinstance(pool, python_runtime.DaemonThreadPool)
        daemons = [pool.submit(lambda: threading.current_thread().daemon).result(5) for _ in range(3)]
        assert daemons == [True, True, True]
        assert pool.submit(sum, [1, 2, 3]).result(5) == 6
    finally:
        pool.shutdown(wait=True)
