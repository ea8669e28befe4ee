"""One optimized pipeline's lifecycle, shared by every adapter: :class:`Options` and :class:`OptimizedPipeline`.

An adapter's stand-in object (``OptimizedQueryEngine``, ``OptimizedRunnable``, ...) is a facade: it
keeps the framework's API (its methods, events, callbacks, streams) and hands the lifecycle here.
"""

from ayo_core.pipeline.options import Options
from ayo_core.pipeline.pipeline import OptimizedPipeline

__all__ = ["OptimizedPipeline", "Options"]
