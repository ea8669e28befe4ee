"""``python -m benchmarks.compare`` in a checkout: the runner lives in the installed ``ayo_bench``.

Same as ``ayo compare ...`` and ``python -m ayo_bench.compare ...`` (kept so the old command works).
"""

from __future__ import annotations

import sys

from ayo_bench.compare import main

if __name__ == "__main__":
    sys.exit(main())
