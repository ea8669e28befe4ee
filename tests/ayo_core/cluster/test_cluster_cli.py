"""``ayo cluster`` without a cluster, and the package importing without Ray (no head is started here:
``ayo cluster up`` starts a real ``ray start --head``, too slow for this shared machine's test budget)."""

from __future__ import annotations

import subprocess
import sys

from ayo_core.cli import main
from ayo_core.cluster import cli as cluster_cli


def test_status_and_down_without_a_cluster(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AYO_HOME", str(tmp_path))
    monkeypatch.delenv("AYO_RAY_ADDRESS", raising=False)
    assert main(["cluster", "status"]) == 1
    assert "ayo cluster up" in capsys.readouterr().out
    assert cluster_cli._head_pids() == []  # nothing runs with this head's temp dir
    assert main(["cluster", "down"]) == 0
    assert "stopped 0 head processes" in capsys.readouterr().out


def test_core_and_cluster_packages_import_without_ray():
    code = ("import sys, ayo_core, ayo_core.cluster, ayo_core.engines.registry; "
            "ayo_core.configure(cluster=None); assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
