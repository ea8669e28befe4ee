"""``benchmarks/`` (the README table script) is a folder of the checkout, not an installed package;
the apps and the runner are the installed ``ayo_examples`` and ``ayo_bench``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

if importlib.util.find_spec("ayo_examples") is None:
    # setup.py maps examples/ to ayo_examples: an editable install made before that mapping lacks it.
    pytest.exit("ayo_examples (the examples/ folder, mapped by setup.py) is not importable: redo the editable "
                "install (`make env`, or `.venv/bin/pip install --no-deps -e .`)", returncode=4)
