"""Backend-side changes for Ayo, made through the backends' own extension points.

vLLM 0.32 already offers what Ayo's engine scheduler needs through public
options: ``--scheduling-policy priority`` with a per-request ``priority``,
prefix caching with ``cached_tokens`` reported per request, and prefill-only
requests (``max_tokens=1``). So this package holds no patches today; it is the
place for vLLM general plugins should a future policy need one. Never a fork.
"""
