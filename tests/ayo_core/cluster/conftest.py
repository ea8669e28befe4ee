"""A real two-node Ray cluster on loopback for the cluster tests (``ray.cluster_utils.Cluster``).

Hygiene: no dashboard, usage stats and metrics export off, bound to 127.0.0.1, temp files
under the test's tmp dir (not ``/tmp/ray`` or ``~/.ray``). One cluster for the whole folder:
starting Ray costs seconds on this shared machine; tests name their replicas by group.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from ayo_core.cluster.ray_env import apply_ray_env, connect

apply_ray_env()  # before any test module imports ray: Ray reads these variables at import


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    apply_ray_env()
    import ray
    from ray.cluster_utils import Cluster

    # Ray's unix sockets need a short path: a pytest tmp path may be too long.
    tmp = tempfile.mkdtemp(prefix="ayo-ray-", dir=os.environ.get("AYO_TEST_RAY_TMP", "/tmp"))
    # Ray writes its "current cluster" address file under $RAY_TMPDIR/ray: keep it in ours too.
    os.environ["RAY_TMPDIR"] = tmp
    os.makedirs(os.path.join(tmp, "ray"), exist_ok=True)
    node = {"num_cpus": 2, "include_dashboard": False, "node_ip_address": "127.0.0.1", "temp_dir": tmp,
            "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    cluster.add_node(**{k: v for k, v in node.items() if k not in ("include_dashboard", "temp_dir")})
    connect(cluster.address)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
