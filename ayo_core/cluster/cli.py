"""``ayo cluster up | status | down``: a local Ray head plus Ayo's replicas, for a quick start.

``up`` starts a Ray head bound to 127.0.0.1 (no dashboard, usage stats off, temp files under
``$AYO_HOME/cluster/ray``), writes its address to ``$AYO_HOME/cluster/address`` (what
``configure(cluster="auto")`` reads) and starts the replicas as detached named actors. More
machines join with ``ray start --address <head>``; Ray places replicas on them by resources.
``status`` lists replicas, their load and prefix-cache hit rates (vLLM's ``/metrics``).
``down`` kills every replica (their vLLM / Chroma servers exit with them) and stops the
head's processes, found by the temp dir only this head uses (never ``ray stop``, which would
stop every Ray on the machine).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ayo_core.cluster.ray_env import LOOPBACK_HOSTS, address_file, apply_ray_env, cluster_dir, connect

log = logging.getLogger(__name__)

HEAD_PORT = 6390


def _ray_cli() -> str:
    return shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")


def head_temp_dir() -> Path:
    return cluster_dir() / "ray"


def start_head(num_cpus: int | None, port: int = HEAD_PORT) -> str:
    """Start (or reuse) the local head; its GCS address."""
    if address_file().exists() and _head_pids():
        return address_file().read_text().strip()
    apply_ray_env()
    head_temp_dir().mkdir(parents=True, exist_ok=True)
    cmd = [_ray_cli(), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
           "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={head_temp_dir()}",
           "--object-store-memory=300000000"]  # replicas pass small values: keep /dev/shm for the engines
    if num_cpus is not None:
        cmd.append(f"--num-cpus={num_cpus}")
    env = {**os.environ, "RAY_TMPDIR": str(cluster_dir())}  # Ray's address file too stays ours
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        stop_head()  # a half-started head would block the next try
        raise SystemExit(f"ayo cluster up: `ray start --head` failed:\n{done.stderr[-3000:]}")
    address = f"127.0.0.1:{port}"
    address_file().write_text(address)
    return address


def _head_pids() -> list[int]:
    """Processes of our head: their command line names its temp dir (no other Ray uses it)."""
    marker = str(head_temp_dir()).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry.name))
    return pids


def stop_head(grace: float = 10.0) -> int:
    pids = _head_pids()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.2)
    address_file().unlink(missing_ok=True)
    return len(pids)


def cmd_up(args: argparse.Namespace) -> int:
    from ayo_core.cluster.replicas import ClusterSpec, deploy, wait_ready

    address = start_head(args.num_cpus)
    connect(address)
    spec = ClusterSpec(llm_replicas=args.llm_replicas, embed_replicas=args.embed_replicas,
                       chroma_path=str(cluster_dir() / "chroma") if args.chroma else None,
                       fake_llm={} if args.fake_llm else None,
                       vllm={"dtype": args.dtype} if not args.fake_llm else {})
    endpoints = wait_ready(deploy(spec), timeout=args.timeout)
    print(f"Ray head: {address} (configure(cluster='auto') or AYO_RAY_ADDRESS={address})")
    for name, endpoint in endpoints.items():
        print(f"  {name}: {endpoint}")
    return 0


def replica_status() -> list[dict[str, Any]]:
    """One row per replica: name, kind, endpoint, state, load and prefix-cache counters."""
    import ray

    from ayo_core.cluster.ray_env import NAMESPACE
    from ayo_core.cluster.replicas import replica_names

    rows = []
    for kind in ("llm", "embed", "chroma"):
        for name in replica_names(kind):
            actor = ray.get_actor(name, namespace=NAMESPACE)
            row: dict[str, Any] = {"name": name, "kind": kind}
            try:
                row["endpoint"] = ray.get(actor.endpoint.remote(), timeout=5)
                row["state"] = "alive"
                if kind == "llm" and str(row["endpoint"]).startswith("http"):
                    m = ray.get(actor.metrics.remote(), timeout=5)
                    row.update(running=m["running"], waiting=m["waiting"],
                               hit_rate=m["prefix_hits"] / m["prefix_queries"] if m["prefix_queries"] else 0.0)
            except Exception as exc:  # noqa: BLE001 - restarting or unreachable: shown as such
                row["state"] = f"unavailable ({type(exc).__name__})"
            rows.append(row)
    return rows


def cmd_status(args: argparse.Namespace) -> int:
    if not address_file().exists() and not os.environ.get("AYO_RAY_ADDRESS"):
        print("no cluster: start one with `ayo cluster up`")
        return 1
    connect(os.environ.get("AYO_RAY_ADDRESS") or "auto")
    import ray

    print(f"nodes alive: {sum(1 for n in ray.nodes() if n['Alive'])}; resources: {ray.cluster_resources()}")
    for row in replica_status():
        load = ""
        if "hit_rate" in row:
            load = f" running={row['running']:.0f} waiting={row['waiting']:.0f} prefix-hit={row['hit_rate']:.1%}"
        print(f"  {row['name']:<14} {row['state']:<10} {row.get('endpoint', '')}{load}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from ayo_core.cluster.replicas import remove_all

    if address_file().exists() and _head_pids():
        connect("auto")
        killed = remove_all()
        print(f"removed replicas: {', '.join(killed) or 'none'}")
        import ray

        ray.shutdown()
    print(f"stopped {stop_head()} head processes")
    return 0


def main(argv: list[str]) -> int:
    """``ayo cluster ...`` (registered in :mod:`ayo_core.cli`)."""
    parser = argparse.ArgumentParser(prog="ayo cluster", description="Ayo's engines as replicas on Ray.")
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start a local Ray head and the replicas")
    up.add_argument("--llm-replicas", type=int, default=1)
    up.add_argument("--embed-replicas", type=int, default=0)
    up.add_argument("--chroma", action="store_true", help="also run a Chroma server reachable from every node")
    up.add_argument("--num-cpus", type=int, default=None, help="CPUs the head offers (default: all)")
    up.add_argument("--dtype", default="float32")
    up.add_argument("--fake-llm", action="store_true", help="fake LLM replicas (trying the tier out, no model)")
    up.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for replicas to be ready")
    sub.add_parser("status", help="replicas, load, prefix-cache hit rates")
    sub.add_parser("down", help="remove every replica and stop the local head")
    args = parser.parse_args(argv)
    # Before anything imports ray (it reads its environment once): a cluster given by
    # AYO_RAY_ADDRESS on another machine is not loopback; ours always is.
    remote = os.environ.get("AYO_RAY_ADDRESS", "")
    host = remote.removeprefix("ray://").rsplit(":", 1)[0] if remote not in ("", "auto") else "127.0.0.1"
    apply_ray_env(loopback=host in LOOPBACK_HOSTS)
    handler = {"up": cmd_up, "status": cmd_status, "down": cmd_down}[args.action]
    return handler(args)
