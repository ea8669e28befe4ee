"""Engine replicas as Ray actors: vLLM servers, embedding models, a Chroma server.

Why actors and not Ray Serve deployments: Ayo routes each LLM request to a *chosen* replica
(prefix affinity needs the replica that holds the prompt's KV blocks) and re-sends a failed
request itself so no answer is lost or duplicated; a Serve handle picks the replica itself
and would put its proxy hop into every token stream. What Serve would add for us, Ray's actor
fault tolerance gives: an actor whose process dies (its vLLM server exiting takes the actor
with it) is restarted by Ray (``max_restarts=-1``), on another node when its node left.

Each actor is *named* (``ayo-llm-0``, ``ayo-embed-0``, ``ayo-chroma``) in the ``ayo``
namespace, so any driver finds the replicas ``ayo cluster up`` started; ``endpoint()`` returns
where to reach it now (a URL, or ``actor://<pid>`` for replicas called through Ray), which
changes when Ray restarts it. Placement: an LLM replica takes a GPU where the cluster has
GPUs, else ``llm_cpus`` CPUs; ``SPREAD`` puts replicas on different nodes when they fit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ray

from ayo_core.cluster.engine import ReplicaList, ReplicaSource
from ayo_core.cluster.ray_env import NAMESPACE, has_gpus

log = logging.getLogger(__name__)

DEFAULT_GROUP = "ayo"  # replicas are named "<group>-<kind>-<i>": several groups may share a cluster


def actor_name(group: str, kind: str, index: int) -> str:
    return f"{group}-{kind}-{index}"


def _exit_when(proc: subprocess.Popen, what: str) -> None:
    """Tie the actor's life to its server's: when the server exits, so does the actor process,
    and Ray restarts the actor (which starts a new server)."""

    def watch() -> None:
        code = proc.wait()
        log.error("%s exited with code %s; exiting the actor so Ray restarts it", what, code)
        os._exit(1)

    threading.Thread(target=watch, name=f"watch-{what}", daemon=True).start()


class LLMReplica:
    """One vLLM server (from the vLLM environment, as ``ayo serve`` runs it) on this actor's node."""

    def __init__(self, model: str | None = None, dtype: str = "float32", kv_cache_gib: float | None = None,
                 extra_args: Sequence[str] = (), startup_timeout: float = 900.0, vllm_python: str | None = None) -> None:
        if vllm_python:  # the driver's AYO_VLLM_PYTHON: workers started before it was set do not inherit it
            os.environ["AYO_VLLM_PYTHON"] = vllm_python
        self.server = _start_tied_server(ray.util.get_node_ip_address(), dtype, model, kv_cache_gib, extra_args,
                                         startup_timeout)
        assert self.server.proc is not None
        _exit_when(self.server.proc, f"vLLM server {self.server.base_url}")

    def endpoint(self) -> str:
        return self.server.base_url

    def server_pid(self) -> int:
        """vLLM's own API process (killing it is a vLLM crash; its launcher then ends the group)."""
        pid = self.server.vllm_pid()
        assert pid is not None
        return pid

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def metrics(self) -> dict[str, float]:
        """vLLM's prefix-cache counters and load from ``/metrics``."""
        with urllib.request.urlopen(f"{self.server.root_url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return parse_vllm_metrics(text)


def parse_vllm_metrics(text: str) -> dict[str, float]:
    """Sum the counters ``ayo cluster status`` shows out of a Prometheus text page."""
    wanted = {"vllm:prefix_cache_queries": "prefix_queries", "vllm:prefix_cache_hits": "prefix_hits",
              "vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
              "vllm:prompt_tokens": "prompt_tokens", "vllm:generation_tokens": "generation_tokens"}
    out = dict.fromkeys(wanted.values(), 0.0)
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        for prefix, key in wanted.items():
            if name in (prefix, f"{prefix}_total"):
                try:
                    out[key] += float(line.rsplit(" ", 1)[1])
                except (IndexError, ValueError):
                    pass
    return out


def _start_tied_server(host: str, dtype: str, model: str | None, kv_cache_gib: float | None,
                       extra_args: Sequence[str], timeout: float) -> Any:
    """Start vLLM so it dies with this actor's process, however the process ends.

    ``LLMServer`` asks Linux to SIGTERM the server when the thread that started it exits
    (``PR_SET_PDEATHSIG``), but only from the main thread; an actor's creation task may run on
    another, short-lived one. So the server starts from a keeper thread that lives as long as
    the process: a killed actor (``ray.kill``, ``ayo cluster down``, its node leaving) takes its
    server with it, and no vLLM is orphaned.
    """
    from ayo_core.engines.llm_server import (
        _LAUNCHER,
        LLMServer,
        find_vllm_python,
        free_port,
        resolve_model,
        tool_calling_args,
    )

    class TiedServer(LLMServer):
        def _launch_command(self, watcher: bool = False) -> list[str]:
            cmd = self.command()
            return [cmd[0], "-c", _LAUNCHER, str(os.getpid()), *cmd[1:]]

    # tool calling as on a server `ayo serve` starts; restarts are Ray's job (the actor), not the server's
    args = [*tool_calling_args("auto", None, default_model=model is None), *extra_args]
    server = TiedServer(resolve_model(model, dtype), free_port(host), dtype=dtype, host=host, kv_cache_gib=kv_cache_gib,
                        extra_args=args, python=find_vllm_python(), max_restarts=0)
    outcome: list[BaseException | None] = []
    ready = threading.Event()

    def keep() -> None:
        try:
            server.start(timeout=timeout)
            outcome.append(None)
        except BaseException as exc:  # handed to the actor's constructor below
            outcome.append(exc)
        ready.set()
        threading.Event().wait()  # never returns: the death signal is tied to this thread

    threading.Thread(target=keep, name="vllm-keeper", daemon=True).start()
    ready.wait()
    if outcome[0] is not None:
        raise outcome[0]
    return server


class FakeLLMReplica:
    """A fake LLM engine (:class:`~ayo_core.runtime.fakes.FakeLLM`, tests and simulation only)
    as a replica: deterministic text, modelled latency in real time, priority-ordered slots."""

    def __init__(self, latency: dict[str, float] | None = None, max_concurrency: int = 8) -> None:
        from ayo_core.runtime.fakes import FakeLLM, LatencyModel

        self.llm = FakeLLM(LatencyModel(**latency) if latency else None, max_concurrency=max_concurrency)

    def endpoint(self) -> str:
        return f"actor://{os.getpid()}"

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    async def complete(self, prompt: Any, **kwargs: Any) -> Any:
        return await self.llm.complete(prompt, **_fake_kwargs(kwargs))

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        return await self.llm.chat(messages, **_fake_kwargs(kwargs))

    async def prefill(self, **kwargs: Any) -> Any:
        return await self.llm.prefill(**kwargs)

    async def tokenize(self, **kwargs: Any) -> list[int]:
        return await self.llm.tokenize(**kwargs)

    def calls(self) -> list[tuple[str, str, int, float, float]]:
        """(method, prompt, priority, start, end) of every call served, in order."""
        return [(c.method, c.prompt, c.priority, c.start, c.end) for c in self.llm.calls]


def _fake_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in kwargs.items() if k in ("max_tokens", "temperature", "priority")}
    if out.get("max_tokens") is None:
        out.pop("max_tokens", None)
    return out


class EmbedReplica:
    """Embedding models on this actor's node. Calls from every driver land in one
    :class:`~ayo_core.engines.embedding.EmbeddingEngine` per settings, whose worker coalesces
    concurrent requests into one forward pass: cross-caller batching stays in the replica."""

    def __init__(self, torch_threads: int | None = 1) -> None:
        self.torch_threads = torch_threads
        self.engines: dict[tuple, Any] = {}

    def endpoint(self) -> str:
        return f"actor://{os.getpid()}"

    def _engine(self, settings: tuple) -> Any:
        from ayo_core.engines.embedding import EmbeddingEngine

        if settings not in self.engines:
            self.engines[settings] = EmbeddingEngine(**dict(settings), torch_threads=self.torch_threads)
        return self.engines[settings]

    async def aembed(self, settings: tuple, texts: list[str], kind: str = "text", normalize: bool | None = None,
                     batch_size: int | None = None) -> list[list[float]]:
        return await self._engine(settings).aembed(texts, kind, normalize, batch_size)

    def statistics(self) -> dict[str, Any]:
        return {repr(k): vars(e.statistics()) for k, e in self.engines.items()}


class ChromaServer:
    """Chroma as a server (``chroma run``) bound to this node's address, telemetry off; reach it
    from any node with ``chromadb.HttpClient`` (``VectorStoreEngine(url=...)``)."""

    def __init__(self, path: str, port: int = 8000) -> None:
        exe = shutil.which("chroma") or os.path.join(os.path.dirname(sys.executable), "chroma")
        host = ray.util.get_node_ip_address()
        self.url = f"http://{host}:{port}"
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        os.makedirs(path, exist_ok=True)
        self.proc = subprocess.Popen([exe, "run", "--host", host, "--port", str(port), "--path", path],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=2):
                    break
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"chroma run exited with code {self.proc.returncode} on port {port}") from None
                time.sleep(0.5)
        _exit_when(self.proc, f"Chroma server {self.url}")

    def endpoint(self) -> str:
        return self.url

    def __del__(self) -> None:
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.terminate()


# -- deploying --------------------------------------------------------------------------------


@dataclass
class ClusterSpec:
    """What ``deploy`` starts. ``fake_llm``: latency settings of FakeLLM replicas instead of vLLM."""

    llm_replicas: int = 1
    embed_replicas: int = 0
    chroma_path: str | None = None
    chroma_port: int = 8000
    llm_cpus: float = 1.0
    embed_cpus: float = 0.5
    detached: bool = True
    fake_llm: dict[str, Any] | None = None
    vllm: dict[str, Any] = field(default_factory=dict)  # LLMReplica kwargs (dtype, kv_cache_gib, ...)
    group: str = DEFAULT_GROUP


def _options(name: str, detached: bool, **resources: Any) -> dict[str, Any]:
    opts: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "max_restarts": -1, "max_task_retries": 0,
                            "scheduling_strategy": "SPREAD",
                            **resources}
    if detached:
        opts["lifetime"] = "detached"
    return opts


def deploy(spec: ClusterSpec) -> dict[str, Any]:
    """Start the replicas of ``spec`` (needs a Ray connection); return their actor handles by name."""
    actors: dict[str, Any] = {}
    gpu = has_gpus()
    for i in range(spec.llm_replicas):
        name = actor_name(spec.group, "llm", i)
        res = {"num_gpus": 1, "num_cpus": 1} if gpu else {"num_cpus": spec.llm_cpus}
        if spec.fake_llm is not None:
            cls = ray.remote(FakeLLMReplica).options(**_options(name, spec.detached, **res))
            actors[name] = cls.remote(**spec.fake_llm)
        else:
            kwargs = dict(spec.vllm)
            if os.environ.get("AYO_VLLM_PYTHON"):
                kwargs.setdefault("vllm_python", os.environ["AYO_VLLM_PYTHON"])
            actors[name] = ray.remote(LLMReplica).options(**_options(name, spec.detached, **res)).remote(**kwargs)
    for i in range(spec.embed_replicas):
        name = actor_name(spec.group, "embed", i)
        actors[name] = ray.remote(EmbedReplica).options(**_options(name, spec.detached, num_cpus=spec.embed_cpus),
                                                        max_concurrency=256).remote()
    if spec.chroma_path:
        name = actor_name(spec.group, "chroma", 0)
        actors[name] = ray.remote(ChromaServer).options(**_options(name, spec.detached, num_cpus=0.25)).remote(
            spec.chroma_path, spec.chroma_port)
    return actors


def wait_ready(actors: dict[str, Any], timeout: float = 900.0) -> dict[str, str]:
    """Block until every actor answers ``endpoint()``; their endpoints by name."""
    names = list(actors)
    refs = [actors[n].endpoint.remote() for n in names]
    return dict(zip(names, ray.get(refs, timeout=timeout), strict=True))


def replica_names(kind: str, group: str = DEFAULT_GROUP) -> list[str]:
    """Names of the live-or-restarting replicas of ``kind`` ("llm", "embed", "chroma") in ``group``."""
    listed = ray.util.list_named_actors(all_namespaces=True)
    prefix = f"{group}-{kind}-"
    names = [a["name"] for a in listed if a.get("namespace") == NAMESPACE and a["name"].startswith(prefix)]
    return sorted(names, key=lambda n: (len(n), n))


def remove_all(kinds: Sequence[str] = ("llm", "embed", "chroma"), group: str = DEFAULT_GROUP) -> list[str]:
    """Kill every replica of ``kinds`` in ``group`` (no restart): what ``ayo cluster down`` does first."""
    killed = []
    for kind in kinds:
        for name in replica_names(kind, group):
            try:
                ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
                killed.append(name)
            except ValueError:
                pass  # already gone
    return killed


# -- replica sources for the cluster engines ---------------------------------------------------


class ActorLLM:
    """The LLMEngine methods of a replica called through Ray (fake replicas)."""

    def __init__(self, actor: Any, endpoint: str) -> None:
        self.actor, self.endpoint = actor, endpoint

    async def _generate(self, method: str, first: Any, stream_cb: Any, kwargs: dict[str, Any]) -> Any:
        kwargs = {k: v for k, v in kwargs.items() if k != "tool_call_cb"}  # a callback does not cross Ray
        result = await getattr(self.actor, method).remote(first, **kwargs)
        if stream_cb is not None and result.text:
            maybe = stream_cb(result.text)  # one delta: a fake replica does not stream across Ray
            if asyncio.iscoroutine(maybe):
                await maybe
        return result

    async def complete(self, prompt: Any, stream_cb: Any = None, **kwargs: Any) -> Any:
        return await self._generate("complete", prompt, stream_cb, kwargs)

    async def chat(self, messages: list[dict[str, Any]], stream_cb: Any = None, **kwargs: Any) -> Any:
        return await self._generate("chat", messages, stream_cb, kwargs)

    async def prefill(self, **kwargs: Any) -> Any:
        return await self.actor.prefill.remote(**kwargs)

    async def tokenize(self, **kwargs: Any) -> list[int]:
        return list(await self.actor.tokenize.remote(**kwargs))

    async def health(self) -> bool:
        return bool(await self.actor.endpoint.remote())


def ray_replica_source(kind: str = "llm", endpoint_timeout: float = 3.0, model: str | None = None,
                       group: str = DEFAULT_GROUP) -> ReplicaSource:
    """A source listing the ``kind`` replicas in the cluster now: engines are kept per (name,
    endpoint), so a replica restarted by Ray (new endpoint) shows up as a new engine."""
    from ayo_core.engines.llm_client import DEFAULT_MODEL, LLMEngine

    engines: dict[tuple[str, str], Any] = {}

    async def one(name: str) -> tuple[str, Any] | None:
        try:
            actor = ray.get_actor(name, namespace=NAMESPACE)
            endpoint = await asyncio.wait_for(asyncio.wrap_future(actor.endpoint.remote().future()),
                                              endpoint_timeout)
        except Exception as exc:  # noqa: BLE001 - restarting or gone: not listed this time
            log.debug("replica %s not reachable now: %s", name, exc)
            return None
        key = (name, str(endpoint))
        if key not in engines:
            if kind == "llm" and str(endpoint).startswith("http"):
                engines[key] = LLMEngine(str(endpoint), model=model or DEFAULT_MODEL)
            elif kind == "llm":
                engines[key] = ActorLLM(actor, str(endpoint))
            else:
                engines[key] = actor
        return name, engines[key]

    async def source() -> ReplicaList:
        names = await asyncio.to_thread(replica_names, kind, group)
        found = await asyncio.gather(*(one(n) for n in names))
        return [f for f in found if f is not None]

    return source
