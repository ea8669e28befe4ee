"""``python -m benchmarks.plot RESULTS.json`` in a checkout: the plots live in the installed ``ayo_bench``.

Same as ``python -m ayo_bench.plot RESULTS.json`` (kept so the old command works).
"""

from __future__ import annotations

import sys

from ayo_bench.plot import plot_result

if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(plot_result(arg))
