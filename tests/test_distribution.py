"""The installed distribution stands alone: ``pip install .`` (not editable), then ``ayo compare``.

The checkout is copied (tracked and untracked-but-not-ignored files, as a clean clone would
have them) and installed non-editable, ``--no-deps``, into a fresh venv whose ``.pth`` puts the
project venv's site-packages *behind* its own: no network, a few seconds, and every Ayo module
must come from the new install. Then, from a working directory outside the checkout and without
``PYTHONPATH``: ``ayo compare --help`` runs, the demo packages import from the venv, the question
files ship with them, the search service starts as a subprocess by its installed name, and no
module is read from the checkout (``benchmarks/``, ``examples/`` or any source folder).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
AYO_PACKAGES = ("ayo_core", "ayo_llamaindex", "ayo_langchain", "ayo_shims", "ayo_examples", "ayo_bench")

# Runs inside the installed venv; prints one JSON line.
PROBE = """
import json, sys
from pathlib import Path
import ayo_bench.compare, ayo_core, ayo_examples.naive_rag, ayo_examples.agent, ayo_langchain, ayo_llamaindex, ayo_shims
from ayo_examples.common import APPS, load_questions
from ayo_examples.search_service import SearchService
import httpx

items = {app: len(load_questions(app, 2)) for app in APPS}
with SearchService(latency_s=0.0, mode="process") as svc:
    health = httpx.get(svc.url + "/health", timeout=30).json()
files = {name: str(Path(m.__file__).resolve()) for name, m in list(sys.modules.items()) if getattr(m, "__file__", None)}
print(json.dumps({"files": files, "questions": items, "health": health}))
"""


def _checkout_files(repo: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-co", "--exclude-standard", "-z"],
                         check=True, capture_output=True, text=True).stdout
    return [f for f in out.split("\0") if f and (repo / f).is_file()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A venv holding a non-editable install of a copy of this checkout."""
    root = tmp_path_factory.mktemp("dist")
    src = root / "src"
    for rel in _checkout_files(REPO):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # The project venv's packages (and its pip and setuptools) sit behind the new venv's own.
    (site / "zz_project_venv.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--force-reinstall",
                    str(src)], check=True, cwd=root, env=_clean_env())
    return {"root": root, "venv": venv, "python": python, "site": site}


def _clean_env() -> dict[str, str]:
    """The environment without anything that points Python at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}


def test_wheel_holds_the_packages_and_not_the_repo_folders(installed: dict[str, Path]) -> None:
    site = installed["site"]
    for name in AYO_PACKAGES:
        assert (site / name / "__init__.py").is_file(), f"{name} is not in the installed distribution"
    assert sorted(p.name for p in (site / "ayo_examples" / "data").glob("*.json")) == [
        "advanced_rag.json", "agent.json", "chat.json", "contextual_retrieval.json", "graph.json", "naive_rag.json",
        "search_augmented.json", "sub_question.json"]
    for folder in ("benchmarks", "examples", "shims", "tests"):
        assert not (site / folder).exists(), f"the distribution installs the checkout folder {folder}/"


def test_ayo_compare_help_runs_from_the_install(installed: dict[str, Path]) -> None:
    proc = subprocess.run([str(installed["venv"] / "bin" / "ayo"), "compare", "--help"], capture_output=True, text=True,
                          cwd=installed["root"], env=_clean_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "usage: ayo compare" in proc.stdout and "naive_rag" in proc.stdout


def test_demo_packages_import_from_the_install_not_the_checkout(installed: dict[str, Path]) -> None:
    proc = subprocess.run([str(installed["python"]), "-c", PROBE], capture_output=True, text=True,
                          cwd=installed["root"], env=_clean_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    files = probe["files"]
    site = installed["site"].resolve()
    for name in AYO_PACKAGES:
        assert Path(files[name]).is_relative_to(site), f"{name} imported from {files[name]}, not the install"
    assert not [m for m in files if m.split(".")[0] in ("benchmarks", "examples", "shims")]
    from_checkout = [f for f in files.values() if Path(f).is_relative_to(REPO) and "site-packages" not in Path(f).parts]
    assert not from_checkout, f"modules read from the checkout: {from_checkout[:5]}"
    assert set(probe["questions"].values()) == {2}
    assert probe["health"]["ok"] and probe["health"]["documents"] > 100
