"""``make compat``: the offline adapter tests against the oldest and newest supported frameworks.

For each end of the supported ranges declared in ``pyproject.toml`` (``llama-index-core``
0.14.x, ``langchain-core`` 1.x) this builds a throwaway virtual environment, installs the
pinned cores plus every LlamaIndex / LangChain / LangGraph package the project depends on
(pip picks the versions that fit the pins), then runs::

    pytest -m "not llm and not slow" tests/ayo_llamaindex tests/ayo_langchain tests/ayo_shims

and ``ayo_shims.touchpoints.verify()`` over every declared touchpoint.

Why the environments overlay the project venv: the heavy dependencies (torch, ray, chromadb,
transformers, ...) do not depend on the framework versions under test, so a ``.pth`` file
puts the project venv's site-packages *behind* the throwaway venv's own. Only what the pins
change is installed (a minute, not a multi-GB download); pip never uninstalls the project
venv's copies (they lie outside its environment), it shadows them. torch is constrained to
``torch==2.13.0`` on every install so pip can never pull an unpinned (CUDA) build.

The venvs live in ``$AYO_COMPAT_DIR`` (default ``$AYO_HOME/compat``, i.e. ``~/.cache/ayo/compat``)
and are rebuilt only when their pins or the project venv change, so a second run is quick.
The repository under test reaches the venvs through ``PYTHONPATH`` (a folder of links for the
``package_dir`` mappings), so one cache serves every checkout. Results: a table on stdout and
``compat-results.json`` (with each run's log path) in the cache folder.

    .venv/bin/python .ci/compat.py                      # oldest and newest, found with `pip index versions`
    .venv/bin/python .ci/compat.py --only newest
    .venv/bin/python .ci/compat.py --pin oldest llama-index-core==0.14.0 langchain-core==1.0.0
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version

log = logging.getLogger("ayo.compat")
REPO = Path(__file__).resolve().parent.parent
CORES = ("llama-index-core", "langchain-core")
FRAMEWORK_PREFIXES = ("llama-index", "langchain", "langgraph")
# setup.py's package_dir mappings: import name -> folder of the repository.
MAPPED_PACKAGES = {"ayo_shims": "shims/ayo_shims", "ayo_examples": "examples"}
TEST_PATHS = ("tests/ayo_llamaindex", "tests/ayo_langchain", "tests/ayo_shims")
TORCH_PIN = "torch==2.13.0"
TEST_TIMEOUT_S = 3600


def cache_dir() -> Path:
    if os.environ.get("AYO_COMPAT_DIR"):
        return Path(os.environ["AYO_COMPAT_DIR"])
    home = os.environ.get("AYO_HOME") or str(Path.home() / ".cache" / "ayo")
    return Path(home) / "compat"


def project_requirements() -> list[Requirement]:
    """Runtime and dev requirements from pyproject.toml."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return [Requirement(r) for r in reqs]


def framework_requirements() -> list[Requirement]:
    """The LlamaIndex / LangChain / LangGraph packages: the ones a core pin can move."""
    return [r for r in project_requirements() if r.name.startswith(FRAMEWORK_PREFIXES)]


def available_versions(name: str) -> list[Version]:
    """Released versions of ``name`` on the index (``pip index versions``), oldest first."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name],
                         capture_output=True, text=True, timeout=300)
    match = re.search(r"Available versions: (.+)", out.stdout)
    if out.returncode or not match:
        raise RuntimeError(f"`pip index versions {name}` failed (is PyPI reachable?): {out.stderr.strip()[-500:]}\n"
                           f"Pin the versions instead: --pin oldest {name}==X ...")
    return sorted(Version(v.strip()) for v in match.group(1).split(","))


def installable(name: str, version: str) -> str:
    """'' when pip can resolve ``name==version`` with its dependencies from the index, else pip's error."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as constraints:
        constraints.write(TORCH_PIN + "\n")
        constraints.flush()
        out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "-q", "--disable-pip-version-check",
                              "-c", constraints.name, f"{name}=={version}"], capture_output=True, text=True, timeout=900)
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("ERROR")]
    return "" if out.returncode == 0 else (errors[0] if errors else out.stderr.strip()[-300:])


def supported_ends(skipped: dict[str, str], tries: int = 4) -> dict[str, dict[str, str]]:
    """{"oldest": {core: version}, "newest": {...}}: the ends of each core's supported range.

    A release the index lists but pip cannot install (a mirror that lags: the release is there,
    a dependency it needs is not) is skipped for the next one inward, and noted in ``skipped``.
    """
    specs = {r.name: r.specifier for r in framework_requirements() if r.name in CORES}
    ends: dict[str, dict[str, str]] = {"oldest": {}, "newest": {}}
    for name in CORES:
        versions = [str(v) for v in available_versions(name) if not v.is_prerelease and v in specs[name]]
        if not versions:
            raise RuntimeError(f"no released {name} matches pyproject's {specs[name]}")
        for end, ordered in (("oldest", versions), ("newest", versions[::-1])):
            for version in ordered[:tries]:
                error = installable(name, version)
                if not error:
                    ends[end][name] = version
                    break
                log.warning("%s %s is listed but not installable here, trying the next: %s", name, version, error)
                skipped[f"{name}=={version}"] = error
            else:
                raise RuntimeError(f"none of {ordered[:tries]} of {name} installs here (see the warnings above)")
    return ends


def install_list(pins: dict[str, str]) -> list[str]:
    """The framework requirements with the cores replaced by the pins."""
    out = [f"{name}=={version}" for name, version in pins.items()]
    out += [str(r) for r in framework_requirements() if r.name not in pins]
    return out


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def prepare_env(venv: Path, pins: dict[str, str]) -> dict[str, Any]:
    """Create (or reuse) the throwaway venv for ``pins``; returns its stamp (what it was built from)."""
    base_site = sysconfig.get_paths()["purelib"]
    wanted = {"base_site_packages": base_site, "install": install_list(pins), "torch": TORCH_PIN}
    stamp_path = venv / "ayo-compat-stamp.json"
    if stamp_path.exists() and json.loads(stamp_path.read_text()).get("wanted") == wanted:
        log.info("%s: reusing the venv (same pins, same project venv)", venv.name)
        return json.loads(stamp_path.read_text())
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    venv_site = subprocess.run([str(_venv_python(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip()
    # Processed after the venv's own .pth files: the project venv's packages come *behind* the venv's.
    Path(venv_site, "zz_ayo_project_venv.pth").write_text(f"import site; site.addsitedir({base_site!r})\n")
    constraints = venv / "constraints.txt"
    constraints.write_text(TORCH_PIN + "\n")
    cmd = [str(_venv_python(venv)), "-m", "pip", "install", "-q", "-U", "--disable-pip-version-check",
           "-c", str(constraints), *wanted["install"]]
    log.info("%s: %s", venv.name, " ".join(cmd[3:]))
    subprocess.run(cmd, check=True, timeout=3600)
    stamp = {"wanted": wanted, "installed": installed_versions(venv), "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    stamp_path.write_text(json.dumps(stamp, indent=1) + "\n")
    return stamp


def installed_versions(venv: Path) -> dict[str, str]:
    """Versions the venv's interpreter sees for the framework packages (its own or the project venv's)."""
    names = [*CORES, *(r.name for r in framework_requirements())]
    code = ("import json, sys, importlib.metadata as m\n"
            "print(json.dumps({n: m.version(n) for n in dict.fromkeys(sys.argv[1:])}))")
    out = subprocess.run([str(_venv_python(venv)), "-c", code, *names], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def repo_pythonpath(tmp: Path) -> str:
    """PYTHONPATH that imports this checkout: a folder of links for the mapped packages, then the repo."""
    links = tmp / "pyshim"
    links.mkdir()
    for name, folder in MAPPED_PACKAGES.items():
        if (REPO / folder).is_dir():
            (links / name).symlink_to(REPO / folder)
    return os.pathsep.join([str(links), str(REPO)])


VERIFY_CODE = """
import importlib, json, pkgutil
import ayo_shims
from ayo_shims import touchpoints as tp
for m in pkgutil.iter_modules(ayo_shims.__path__, "ayo_shims."):
    importlib.import_module(m.name)   # each framework module declares its touchpoints on import
failed = {}
for t in tp.touchpoints():
    try:
        t.verify()
    except Exception as exc:
        failed[t.name] = str(exc)
print(json.dumps({"touchpoints": len(tp.touchpoints()), "failed": failed}))
"""


def run_checks(venv: Path, name: str) -> dict[str, Any]:
    """pip check, touchpoint verification and the offline adapter tests in ``venv``."""
    py = str(_venv_python(venv))
    with tempfile.TemporaryDirectory(prefix="ayo-compat-") as tmp:
        env = {**os.environ, "PYTHONPATH": repo_pythonpath(Path(tmp)), "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False", "RAY_AUTH_MODE": "disabled"}
        pip_check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True, env=env)
        verify = subprocess.run([py, "-c", VERIFY_CODE], capture_output=True, text=True, env=env, cwd=REPO)
        log_path = cache_dir() / f"{name}-pytest.log"
        start = time.monotonic()
        with log_path.open("w") as f:
            tests = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--continue-on-collection-errors",
                                    "-m", "not llm and not slow",
                                    *TEST_PATHS], stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                   timeout=TEST_TIMEOUT_S)
        text = log_path.read_text()
    return {"pip_check": pip_check.stdout.strip().splitlines(), "touchpoints": _json_or_error(verify),
            "pytest_rc": tests.returncode, "pytest_counts": pytest_counts(text),
            "failures": re.findall(r"^(?:FAILED|ERROR) (tests/\S+)", text, flags=re.M),
            "failure_causes": failure_causes(text),
            "pytest_log": str(log_path), "pytest_s": round(time.monotonic() - start, 1)}


def _json_or_error(proc: subprocess.CompletedProcess[str]) -> Any:
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": (proc.stderr or proc.stdout).strip()[-2000:]}


def failure_causes(text: str) -> dict[str, list[str]]:
    """Failing tests grouped by their first error line (``E   AttributeError: ...``), most frequent first."""
    sections = re.split(r"\n_{3,} (.+?) _{3,}\n", text)
    causes: dict[str, list[str]] = {}
    for test, body in zip(sections[1::2], sections[2::2], strict=False):
        errors = [ln[1:].strip() for ln in body.splitlines() if ln.startswith("E ")]
        cause = next((e for e in errors if re.search(r"Error|Exception|Timeout|assert", e)), errors[0] if errors else "?")
        causes.setdefault(re.sub(r"0x[0-9a-f]+", "0x..", cause)[:200], []).append(test)
    return dict(sorted(causes.items(), key=lambda kv: -len(kv[1])))


def pytest_counts(text: str) -> dict[str, int]:
    """Counts from pytest's final summary line ("3 failed, 120 passed, 40 deselected in 9.1s")."""
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    if not lines:
        return {}
    return {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)",
                                                    lines[-1])}


def print_summary(results: dict[str, Any]) -> None:
    for name, r in results.items():
        pins = ", ".join(f"{k} {v}" for k, v in r["pins"].items())
        print(f"\n== {name}: {pins} ==")
        if "install_error" in r:
            print(f"  could not install: {r['install_error']}")
            continue
        print(f"  installed: {', '.join(f'{k} {v}' for k, v in r['installed'].items())}")
        print(f"  pip check: {'ok' if not r['pip_check'] or 'No broken' in r['pip_check'][0] else r['pip_check']}")
        tp = r["touchpoints"]
        print(f"  touchpoints: {tp.get('touchpoints')} declared, failed: {tp.get('failed') or tp.get('error') or 'none'}")
        print(f"  pytest (rc {r['pytest_rc']}, {r['pytest_s']} s): {r['pytest_counts']}  log: {r['pytest_log']}")
        for cause, tests in r.get("failure_causes", {}).items():
            print(f"    {len(tests):3d} x {cause}  (e.g. {tests[0]})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="make compat", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["oldest", "newest"], action="append", help="run one end only (repeatable)")
    ap.add_argument("--pin", nargs="+", action="append", metavar=("END", "PKG==VERSION"), default=[],
                    help="use these versions for END instead of asking the index")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    pinned = {p[0]: dict(s.split("==", 1) for s in p[1:]) for p in args.pin}
    names = args.only or ["oldest", "newest"]
    skipped: dict[str, str] = {}
    ends = pinned if set(pinned) >= set(names) else {**supported_ends(skipped), **pinned}
    cache_dir().mkdir(parents=True, exist_ok=True)
    out = cache_dir() / "compat-results.json"
    # Runs of one end (--only) update their entry and keep the other's.
    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    results.pop("skipped_releases", None)
    for name in names:
        results[name] = run_end(name, ends[name])
        out.write_text(json.dumps({**results, "skipped_releases": skipped}, indent=1) + "\n")
    print_summary({k: v for k, v in results.items() if k in names})
    for release, error in skipped.items():
        print(f"\nskipped {release}: {error}")
    print(f"\nwrote {out}")
    return 0 if all(_passed(results[name]) for name in names) else 1


def run_end(name: str, pins: dict[str, str]) -> dict[str, Any]:
    """Build (or reuse) the venv for ``pins`` and run the checks; an install failure is a result, not a crash."""
    venv = cache_dir() / ("venv-" + "-".join(f"{k}{v}" for k, v in sorted(pins.items())))
    try:
        stamp = prepare_env(venv, pins)
    except subprocess.CalledProcessError as exc:
        log.error("%s: installing %s failed: %s", name, pins, exc)
        shutil.rmtree(venv, ignore_errors=True)  # half-installed: never reused
        return {"pins": pins, "venv": str(venv), "install_error": str(exc)}
    return {"pins": pins, "venv": str(venv), "installed": stamp["installed"], **run_checks(venv, name)}


def _passed(result: dict[str, Any]) -> bool:
    tp = result.get("touchpoints", {})
    return result.get("pytest_rc") == 0 and not tp.get("failed") and "error" not in tp


if __name__ == "__main__":
    sys.exit(main())
