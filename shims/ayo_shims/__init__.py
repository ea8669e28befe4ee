"""``ayo_shims``: the interception layer, the one place Ayo touches framework internals.

Every wrapt hook, every read of a framework's private attribute and every patch of Python
or SDK internals lives here, declared once in :mod:`ayo_shims.touchpoints` with the
versions it was checked against (one module per framework). Adapters import internals
only through this package and call ``touchpoints.verify(...)`` from ``optimize()``.

Dependency direction: ``ayo_shims`` imports the frameworks and SDKs only (never
``ayo_core`` or an adapter). vLLM needs no backend-side patch today (priority scheduling,
prefix caching and prefill-only requests are public options); should a future policy need
one, it goes here as a vLLM plugin, never a fork.
"""
