"""Start and stop vLLM's OpenAI-compatible server from its own environment.

vLLM lives in ``.venv-vllm`` (the CPU wheel pins a torch of its own, unlike Ayo's), so the server always runs
as a child process: ``<venv>/bin/python -m vllm.entrypoints.openai.api_server``
(the ``vllm`` console script of the CPU wheel is broken). The child gets its
own session/process group so stopping it also stops vLLM's engine-core
workers, and it is stopped on normal exit, on exceptions and at interpreter
exit; on Linux it also receives SIGTERM if the starting thread dies, so a
killed parent does not leave a server holding the two cores.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_SERVED_NAME = "SmolLM2-135M-Instruct"
DEFAULT_HOST = "127.0.0.1"
_DTYPES = ("float32", "bfloat16")
_REPO_ROOT = Path(__file__).resolve().parents[2]
_FIX_SETUP = "run `make demo` (creates .venv-vllm and prepares the models) or `ayo models prepare`"
# The default model's own template has no tools; this one adds them in the format of vLLM's `hermes`
# tool-call parser and renders a request without tools exactly as the model's own template does.
TOOLS_CHAT_TEMPLATE = Path(__file__).resolve().parent / "chat_templates" / "smollm2_tools.jinja"


class LLMServerError(RuntimeError):
    """The vLLM server could not be started (or died while starting)."""


def _ayo_home() -> Path:
    return Path(os.environ.get("AYO_HOME", Path.home() / ".cache" / "ayo")).expanduser()


def find_vllm_python() -> Path:
    """The Python of the vLLM environment: ``$AYO_VLLM_PYTHON``, else ``.venv-vllm`` at the repo root or cwd."""
    explicit = os.environ.get("AYO_VLLM_PYTHON")
    if explicit:
        path = Path(explicit).expanduser()
        if not path.exists():
            raise LLMServerError(f"AYO_VLLM_PYTHON={explicit} does not exist. Fix: point it at .venv-vllm/bin/python "
                                 f"or unset it and {_FIX_SETUP}.")
        return path
    candidates = [_REPO_ROOT / ".venv-vllm" / "bin" / "python", Path.cwd() / ".venv-vllm" / "bin" / "python"]
    for path in candidates:
        if path.exists():
            return path
    raise LLMServerError(f"no vLLM environment found (looked for {', '.join(map(str, candidates))}). "
                         f"Fix: {_FIX_SETUP}, or set AYO_VLLM_PYTHON to the python of an environment with vLLM.")


def resolve_model(model: str | os.PathLike[str] | None, dtype: str) -> Path:
    """The model folder to serve: ``model`` if given, else the prepared SmolLM2 in ``dtype``."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported: use one of {_DTYPES}")
    if model is None:
        from ayo_core import models  # prepares the folder on first use

        path = Path(models.llm_model_path(dtype))
    else:
        path = Path(model).expanduser()
    if not (path / "config.json").exists():
        raise LLMServerError(f"model folder {path} is missing or has no config.json. Fix: {_FIX_SETUP}, "
                             "or pass model= / --model with a Hugging Face model folder.")
    return path


def free_port(host: str = DEFAULT_HOST) -> int:
    """A port that is free right now on ``host`` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def check_port_free(port: int, host: str = DEFAULT_HOST) -> None:
    """Raise LLMServerError naming the port and the fix when something already listens there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like uvicorn: connections in TIME_WAIT from a stopped server do not make the port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise LLMServerError(
                f"port {port} on {host} is already in use ({exc.strerror}). Fix: pass another port "
                f"(--port / port=), or port=None to pick a free one, or stop whatever listens on {port} "
                f"(`ss -ltnp 'sport = :{port}'` shows it); to reuse a running vLLM server set "
                f"AYO_LLM_URL=http://{host}:{port}/v1."
            ) from None


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


# Started instead of vLLM directly, and stays as the process-group leader above it
# (``LLMServer.vllm_pid()`` is vLLM's own process, the launcher's child). Linux SIGTERMs the
# launcher when the thread that started it dies without running atexit (SIGKILL, crash:
# PR_SET_PDEATHSIG); the launcher then stops the *whole* group: vLLM gets SIGTERM and
# LAUNCHER_GRACE_S to shut down, then everything left (its engine-core and worker processes,
# which vLLM does not always take down when its API process is signalled) gets SIGKILL.
# Exec'ing vLLM in place, as before, left engine cores orphaned whenever the API process died
# first. When vLLM exits on its own the launcher ends what is left of the group and exits the
# same way, so restarts and error messages see vLLM's exit. A launcher rather than
# preexec_fn, which is unsafe in a process that runs threads.
LAUNCHER_GRACE_S = 10.0
_LAUNCHER = f"""
import ctypes, os, signal, subprocess, sys, time
child = None
def stop_group(signum, frame):
    deadline = time.monotonic() + {LAUNCHER_GRACE_S}
    if child is not None:
        try:
            os.kill(child.pid, signal.SIGTERM)
            while time.monotonic() < deadline and os.waitpid(child.pid, os.WNOHANG) == (0, 0):
                time.sleep(0.1)
        except (ProcessLookupError, ChildProcessError):
            pass
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, stop_group)
ctypes.CDLL(None).prctl(1, signal.SIGTERM)
if os.getppid() != int(sys.argv[1]):
    sys.exit("ayo: parent exited before vLLM started")
# vLLM too gets SIGTERM if this launcher is SIGKILLed (preexec_fn is safe here: no threads)
child = subprocess.Popen([sys.executable, *sys.argv[2:]],
                         preexec_fn=lambda: ctypes.CDLL(None).prctl(1, signal.SIGTERM))
code = child.wait()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.killpg(0, signal.SIGTERM)
if code < 0:  # end the way vLLM ended (SIGKILL has no handler to reset)
    try:
        signal.signal(-code, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


class LLMServer:
    """One vLLM server child process; ``start()`` returns when ``/health`` answers."""

    def __init__(
        self,
        model: Path,
        port: int,
        dtype: str = "float32",
        served_model_name: str = DEFAULT_SERVED_NAME,
        host: str = DEFAULT_HOST,
        kv_cache_gib: float | None = None,
        extra_args: Sequence[str] = (),
        python: Path | None = None,
        log_dir: Path | None = None,
        max_restarts: int = 3,
    ) -> None:
        self.model, self.port, self.dtype, self.host = model, port, dtype, host
        self.served_model_name = served_model_name
        self.kv_cache_gib = kv_cache_gib
        self.extra_args = tuple(extra_args)
        self.python = python or find_vllm_python()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = (log_dir or _ayo_home() / "logs") / f"vllm-{port}-{stamp}-{os.getpid()}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        # A server that exits on its own (killed, crashed) is restarted on its port, at most
        # max_restarts times, so clients' URLs stay valid; stop() ends that.
        self.max_restarts, self.restarts, self.restarting = max_restarts, 0, False
        self._stopping = threading.Event()
        self._proc_lock = threading.Lock()

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def command(self) -> list[str]:
        return [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model), "--served-model-name", self.served_model_name,
            "--dtype", self.dtype, "--host", self.host, "--port", str(self.port),
            "--enforce-eager",  # starts in ~25 s on CPU; compiled mode changes greedy text
            "--enable-prefix-caching",
            "--scheduling-policy", "priority",  # Ayo's engine scheduler orders requests
            # CPU needs a multiple of 32; small blocks let prefix caching match more of a prompt.
            "--block-size", "32",
            "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens
            "--max-model-len", "8192",
            "--disable-uvicorn-access-log",
            *self.extra_args,
        ]

    def _launch_command(self, watcher: bool = False) -> list[str]:
        cmd = self.command()
        # PR_SET_PDEATHSIG fires when the starting *thread* exits: only tie the server to
        # the main thread, whose exit is the interpreter's, or to the watcher that restarts
        # it, which runs as long as the server it started (stop() ends both).
        if sys.platform.startswith("linux") and (watcher or threading.current_thread() is threading.main_thread()):
            return [cmd[0], "-c", _LAUNCHER, str(os.getpid()), *cmd[1:]]
        return cmd

    def start(self, timeout: float = 300.0) -> None:
        self._launch()
        atexit.register(self.stop)
        try:
            self._wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        if self.max_restarts > 0:
            threading.Thread(target=self._watch, args=(timeout,), name=f"ayo-vllm-watch-{self.port}",
                             daemon=True).start()

    def _watch(self, startup_timeout: float, interval: float = 0.5) -> None:
        """Restart the server when it exits without stop() (killed, crashed), up to max_restarts times."""
        while not self._stopping.wait(interval):
            with self._proc_lock:
                proc = self.proc
                if self._stopping.is_set() or proc is None or proc.poll() is None:
                    continue
                if self.restarts >= self.max_restarts:
                    log.error("vLLM server on port %s exited (code %s) after %d restarts; not restarting it again. "
                              "Last lines of %s:\n%s", self.port, proc.returncode, self.restarts, self.log_path,
                              _tail(self.log_path))
                    return
                self.restarts += 1
                self.restarting = True
                log.warning("vLLM server on port %s exited with code %s; restarting it (restart %d of %d)",
                            self.port, proc.returncode, self.restarts, self.max_restarts)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # engine-core workers the leader left behind
                proc.wait()
                self._launch(watcher=True)
            try:
                self._wait_healthy(startup_timeout)
            except LLMServerError as exc:
                if not self._stopping.is_set():
                    log.error("vLLM server on port %s did not come back: %s", self.port, exc)
            finally:
                self.restarting = False

    def _launch(self, watcher: bool = False) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        # Explicit kv_cache_gib wins; else the environment's value; else 2 GiB (~4.5 GiB per server in all).
        if self.kv_cache_gib is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.kv_cache_gib:g}"
        else:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        # A sibling .venv on PATH or PYTHONPATH must not leak into vLLM's environment.
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        log.info("starting vLLM on %s (model %s, log %s)", self.base_url, self.model, self.log_path)
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                self._launch_command(watcher), stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )
        from ayo_core.engines.device import note_launched, vllm_environment_device

        # here and in other processes (`ayo serve`), under this launch's pid (a restart notes its own)
        note_launched(self.root_url, vllm_environment_device(self.python), pid=self.proc.pid)

    def _wait_healthy(self, timeout: float) -> None:
        proc = self.proc  # stop() may take it meanwhile: then this waits for nothing more
        deadline = time.monotonic() + timeout
        while proc is not None and proc is self.proc and time.monotonic() < deadline:
            code = proc.poll()
            if code is not None:
                raise LLMServerError(f"vLLM server on port {self.port} exited with code {code} while starting. "
                                     f"Last lines of {self.log_path}:\n{_tail(self.log_path)}")
            if self.healthy():
                log.info("vLLM ready on %s", self.base_url)
                return
            time.sleep(0.5)
        raise LLMServerError(f"vLLM server on port {self.port} was not healthy after {timeout:.0f} s "
                             f"(raise startup_timeout if the machine is busy). Last lines of {self.log_path}:\n"
                             f"{_tail(self.log_path)}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.root_url}/health", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def vllm_pid(self) -> int | None:
        """The pid of vLLM's API process: the launcher's child where a launcher runs, else the
        process Ayo started (``proc.pid`` is the process group to stop either way)."""
        proc = self.proc
        if proc is None:
            return None
        try:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        except OSError:
            children = []
        return int(children[0]) if children else proc.pid

    def serving(self) -> bool:
        """Alive, or down and about to be restarted (restarts left, not stopped)."""
        return self.alive() or self.restarting or (self.proc is not None and self.restarts < self.max_restarts)

    def stop(self, grace: float = 15.0) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL after ``grace`` seconds. Idempotent."""
        self._stopping.set()
        with self._proc_lock:
            proc, self.proc = self.proc, None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                log.warning("vLLM server pid %s ignored %s", proc.pid, sig.name)
        # The leader may be gone while engine-core workers of the group linger.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        from ayo_core.engines.device import forget_launched

        forget_launched(self.root_url)
        log.info("vLLM server on port %s stopped", self.port)


def tool_calling_args(tool_call_parser: str | None, chat_template: str | os.PathLike[str] | None,
                      default_model: bool) -> list[str]:
    """vLLM flags for tool calling: ``auto`` means the ``hermes`` parser and Ayo's tool-aware template
    for the default model, and nothing for a model of the user's (whose template Ayo cannot know);
    ``None`` / ``"none"`` turns tool calling off; any other name is vLLM's parser of that name."""
    if tool_call_parser == "auto":
        tool_call_parser = "hermes" if default_model else None
        chat_template = chat_template or (TOOLS_CHAT_TEMPLATE if default_model else None)
    args = [] if chat_template is None else ["--chat-template", str(chat_template)]
    if tool_call_parser in (None, "none"):
        return args
    return [*args, "--enable-auto-tool-choice", "--tool-call-parser", tool_call_parser]


def start_server(
    port: int | None = None,
    dtype: str = "float32",
    model: str | os.PathLike[str] | None = None,
    served_model_name: str = DEFAULT_SERVED_NAME,
    startup_timeout: float = 300.0,
    extra_args: Sequence[str] = (),
    kv_cache_gib: float | None = None,
    host: str = DEFAULT_HOST,
    tool_call_parser: str | None = "auto",
    chat_template: str | os.PathLike[str] | None = None,
) -> LLMServer:
    """Start a vLLM server and return it once healthy; the caller must ``stop()`` it (atexit also does).

    Tool calling (``tool_call_parser``, ``chat_template``: see :func:`tool_calling_args`) is on by
    default for the default model: agents need it, and requests without tools are unchanged."""
    if port is not None:
        check_port_free(port, host)
    python = find_vllm_python()
    path = resolve_model(model, dtype)
    if port is None:
        port = free_port(host)
    extra_args = [*tool_calling_args(tool_call_parser, chat_template, default_model=model is None), *extra_args]
    server = LLMServer(path, port, dtype=dtype, served_model_name=served_model_name, host=host,
                       kv_cache_gib=kv_cache_gib, extra_args=extra_args, python=python)
    server.start(timeout=startup_timeout)
    return server


@contextlib.contextmanager
def serve_llm(
    port: int | None = None,
    dtype: str = "float32",
    model: str | os.PathLike[str] | None = None,
    served_model_name: str = DEFAULT_SERVED_NAME,
    startup_timeout: float = 300.0,
    extra_args: Sequence[str] = (),
    kv_cache_gib: float | None = None,
    host: str = DEFAULT_HOST,
    reuse_env: bool = True,
    tool_call_parser: str | None = "auto",
    chat_template: str | os.PathLike[str] | None = None,
) -> Iterator[str]:
    """Run a vLLM server for the ``with`` block and yield its base URL (``http://HOST:PORT/v1``).

    ``AYO_LLM_URL``, when set (and ``reuse_env``), is yielded as is and nothing starts.
    ``port=None`` picks a free port; a busy ``port`` raises LLMServerError naming it.
    ``kv_cache_gib`` sets ``VLLM_CPU_KVCACHE_SPACE`` (default: the environment's value,
    else 2). The server (its whole process group) is stopped on exit, on exceptions and at
    interpreter exit. The log goes to ``$AYO_HOME/logs``. Tool calling: see :func:`start_server`.
    """
    existing = os.environ.get("AYO_LLM_URL")
    if reuse_env and existing:
        yield existing
        return
    server = start_server(port, dtype, model, served_model_name, startup_timeout, extra_args, kv_cache_gib, host,
                          tool_call_parser, chat_template)
    try:
        yield server.base_url
    finally:
        server.stop()


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main_serve(argv: Sequence[str] | None = None) -> int:
    """``ayo serve``: run the server in the foreground, print its base URL, stop on Ctrl-C."""
    parser = argparse.ArgumentParser(prog="ayo serve", description="Run vLLM's OpenAI-compatible server "
                                     "(from .venv-vllm) with prefix caching and priority scheduling.")
    parser.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--dtype", choices=_DTYPES, default="float32")
    parser.add_argument("--model", default=None, help="model folder (default: the prepared SmolLM2-135M-Instruct)")
    parser.add_argument("--served-model-name", default=DEFAULT_SERVED_NAME)
    parser.add_argument("--startup-timeout", type=float, default=300.0)
    parser.add_argument("--tool-call-parser", default="auto",
                        help="vLLM's tool-call parser; 'auto' (default): 'hermes' with Ayo's tool-aware chat "
                             "template for the default model, off for a --model of yours; 'none': off")
    parser.add_argument("--chat-template", default=None,
                        help="a Jinja chat template file (default: the model's own, or Ayo's tool-aware one)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # SIGTERM (e.g. from a supervisor) must run the same cleanup as Ctrl-C.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    server: LLMServer | None = None
    try:
        server = start_server(args.port, args.dtype, args.model, args.served_model_name, args.startup_timeout,
                              tool_call_parser=args.tool_call_parser, chat_template=args.chat_template)
        # From here a signal only sets a flag: a KeyboardInterrupt raised inside Popen.poll() can
        # leave its wait lock held, and stop() would then wait out its whole grace period.
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: stop.set())
        print(server.base_url, flush=True)
        print("vLLM is serving; press Ctrl-C to stop.", file=sys.stderr, flush=True)
        while server.serving():
            if stop.wait(1.0):
                return 0
        print(f"ayo serve: the vLLM server exited. Last lines of {server.log_path}:\n{_tail(server.log_path)}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    except (RuntimeError, ValueError) as exc:  # LLMServerError, ModelNotAvailableError, bad dtype
        print(f"ayo serve: {exc}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.stop()
