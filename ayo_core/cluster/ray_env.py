"""Connecting to Ray with this project's hygiene: no dashboard, no usage stats, no metrics export,
loopback only, temp files under ``$AYO_HOME`` (by default Ray writes to a ``ray`` folder in the system temp dir and to ``~/.ray``).

``ray`` is imported only inside these functions: ``import ayo_core.cluster`` works without Ray
running (or installed) as long as no cluster is asked for.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

NAMESPACE = "ayo"
# Set before Ray starts any process, so every raylet/worker inherits them.
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_enable_metrics_collection": "0",
    "RAY_DEDUP_LOGS": "0",
    "ANONYMIZED_TELEMETRY": "False",  # Chroma's telemetry, for the Chroma server replica
}


def ayo_home() -> Path:
    return Path(os.environ.get("AYO_HOME", Path.home() / ".cache" / "ayo")).expanduser()


def cluster_dir() -> Path:
    """Where ``ayo cluster up`` keeps the head's temp dir and address file."""
    return ayo_home() / "cluster"


def address_file() -> Path:
    return cluster_dir() / "address"


# Ray turns a loopback address into the host's outward IP before connecting ("so other nodes can
# reach it"), which fails when everything is bound to 127.0.0.1; with this variable at 0 it keeps
# loopback. Read when Ray is imported: set before the first ``import ray``.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def apply_ray_env(loopback: bool = True) -> None:
    """Set the hygiene variables (unless the user set them); ``loopback``: this process talks to a
    cluster bound to 127.0.0.1 (tests, ``ayo cluster up``), not one spanning machines."""
    for key, value in RAY_ENV.items():
        os.environ.setdefault(key, value)
    if loopback:
        os.environ.setdefault(LOOPBACK_ENV, "0")


def resolve_address(address: str | None) -> str | None:
    """``"auto"`` means the cluster ``ayo cluster up`` started (its address file), else Ray's own
    ``auto`` (``RAY_ADDRESS`` / the running local cluster); ``None`` starts a local one."""
    if address == "auto" and address_file().exists():
        return address_file().read_text().strip()
    return address


def connect(address: str | None = None, *, temp_dir: str | os.PathLike[str] | None = None,
            num_cpus: int | None = None, **init_kwargs: Any) -> Any:
    """``ray.init`` with the hygiene above (idempotent: an existing connection is kept).

    ``address``: ``"ray://host:port"`` (Ray client), ``"host:port"``/``"auto"`` (join as a driver),
    or None to start a local single-node cluster under ``temp_dir`` (default ``$AYO_HOME/ray``).
    """
    address = resolve_address(address)
    host = (address or "127.0.0.1").removeprefix("ray://").rsplit(":", 1)[0]
    apply_ray_env(loopback=host in LOOPBACK_HOSTS)
    import ray

    if ray.is_initialized():
        return ray.get_runtime_context()
    kwargs: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": False, "ignore_reinit_error": True,
                              "configure_logging": False, **init_kwargs}
    if address is None:
        tmp = Path(temp_dir or ayo_home() / "ray")
        tmp.mkdir(parents=True, exist_ok=True)
        kwargs.update(include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=str(tmp))
        if num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
    log.info("connecting to Ray at %s", address or "a new local cluster")
    return ray.init(address=address, **kwargs)


def has_gpus() -> bool:
    """Whether the cluster offers GPUs (then each LLM replica asks for one)."""
    import ray

    return float(ray.cluster_resources().get("GPU", 0)) >= 1
