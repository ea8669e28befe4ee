"""openai SDK touchpoints: the SDK internals Ayo's adapters reach.

Both adapters send a model's requests through Ayo's LLM engine and, when the server
answers with an HTTP error, hand the user the very exception the stock SDK would raise.
That exception is built by the SDK itself (``_make_status_error_from_response``: same
class, same message), from the client that owns the user's resource (a resource such as
``AsyncOpenAI().chat.completions`` keeps it in ``_client``; its ``timeout`` and
``max_retries`` are what the user configured). Each function below is one such reach,
declared once; nothing here imports ``ayo_core`` or an adapter.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from ayo_shims.touchpoints import all_of, declare, has_attr, has_params

FRAMEWORK = "openai"
CHECKED = "2.x (checked 2.54.0)"


def _annotates(module: str, qualname: str, attr: str) -> Callable[[], None]:
    """Check: the class ``module.qualname`` (or a base) annotates the instance attribute ``attr``.

    ``_client`` is set in ``__init__`` only, so ``hasattr`` on the class cannot tell; the SDK
    declares it as a class annotation.
    """
    def check() -> None:
        cls = getattr(importlib.import_module(module), qualname)
        if not any(attr in inspect.get_annotations(k) for k in inspect.getmro(cls)):
            raise AttributeError(f"{module}.{qualname} declares no instance attribute {attr}")
    return check


RESOURCE_CLIENT = declare(
    "openai._resource.AsyncAPIResource._client", framework=FRAMEWORK, checked=CHECKED,
    why="the client behind a model's resource (chat.completions / completions): its timeout and "
        "max_retries, and the SDK's own error builder",
    check=all_of(_annotates("openai._resource", "AsyncAPIResource", "_client"),
                 _annotates("openai._resource", "SyncAPIResource", "_client"),
                 has_params("openai._resource", "AsyncAPIResource.__init__", ["client"])))


def resource_client(resource: Any) -> Any | None:
    """The ``OpenAI`` / ``AsyncOpenAI`` client a resource belongs to; None for an object that is not
    an SDK resource (a user's own stand-in client)."""
    return getattr(resource, "_client", None)


STATUS_ERROR = declare(
    "openai._base_client.BaseClient._make_status_error_from_response", framework=FRAMEWORK, checked=CHECKED,
    why="an HTTP error of the server becomes the SDK's own exception (same class and message as stock)",
    check=all_of(has_attr("openai", "OpenAI", "_make_status_error_from_response"),
                 has_attr("openai", "AsyncOpenAI", "_make_status_error_from_response"),
                 has_params("openai", "AsyncOpenAI._make_status_error_from_response", ["response"])))


def status_error_from_response(client: Any, response: Any) -> BaseException:
    """The exception the SDK ``client`` raises for the ``httpx.Response`` ``response`` (an HTTP error).

    Raises ``AttributeError`` when ``client`` is not an SDK client.
    """
    return client._make_status_error_from_response(response)
