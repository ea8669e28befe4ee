"""One optimized pipeline's lifecycle, shared by every adapter: :class:`Options`, :class:`OptimizedPipeline`
and the :class:`EngineSet` its recognized models run on.

An adapter's stand-in object (``OptimizedQueryEngine``, ``OptimizedRunnable``, ...) is a facade: it
keeps the framework's API (its methods, events, callbacks, streams) and hands the lifecycle here.
"""

from ayo_core.pipeline.engines import EngineSet
from ayo_core.pipeline.options import Options
from ayo_core.pipeline.pipeline import OptimizedPipeline

__all__ = ["EngineSet", "OptimizedPipeline", "Options"]
