"""The openai SDK's own exceptions, rebuilt from a failure Ayo's engine met on the same request.

Ayo sends a routed model's requests itself (``ayo_core.engines.llm_client``), so a server
error reaches it as an ``LLMEngineError``. Users catch ``openai.BadRequestError`` & co.
(prompt too long, unknown model), so both adapters hand them the exception the SDK would
have raised for that answer: an HTTP error is rebuilt by the SDK's own
``_make_status_error_from_response`` from the server's status and body (same class, same
message); a transport failure becomes ``APIConnectionError`` / ``APITimeoutError`` (what the
SDK raises once its retries are spent).

The SDK internal is reached through :mod:`ayo_shims.openai_sdk` (declared there once).
Duck-typed on the engine error (``status_code``, ``body``, ``__cause__``): ``ayo_shims``
never imports ``ayo_core``.
"""

from __future__ import annotations

import logging
from typing import Any

from ayo_shims import openai_sdk

log = logging.getLogger(__name__)


def status_error(client: Any, status: int, body: str, url: str) -> BaseException | None:
    """The SDK exception ``client`` raises for HTTP ``status`` with ``body`` from ``POST url``;
    None when ``client`` cannot build it (not an openai client, or an SDK without the helper)."""
    import httpx

    response = httpx.Response(status, content=body.encode(), request=httpx.Request("POST", url))
    try:
        return openai_sdk.status_error_from_response(client, response)  # the declared touchpoint
    except Exception:  # noqa: BLE001 - the caller keeps Ayo's own (clear) error instead
        log.debug("could not rebuild the openai SDK error for HTTP %s", status, exc_info=True)
        return None


def transport_error(url: str, timed_out: bool) -> BaseException:
    """``APITimeoutError`` / ``APIConnectionError`` for a request to ``url`` that got no answer."""
    import httpx
    import openai

    request = httpx.Request("POST", url)
    return openai.APITimeoutError(request=request) if timed_out else openai.APIConnectionError(request=request)


def sdk_error(client: Any, url: str, exc: BaseException, transport: bool = True) -> BaseException | None:
    """The SDK's exception for the engine failure ``exc`` of ``POST url``, Ayo's detail as a note.

    An HTTP error (``exc.status_code`` and ``exc.body`` set) becomes the SDK's status error;
    with ``transport``, a timeout or connection failure (``exc.__cause__`` an httpx error)
    becomes the SDK's connection error. None: nothing the SDK would report (a malformed stream)
    or an SDK that cannot build it; the caller keeps ``exc``.
    """
    import httpx

    status, body = getattr(exc, "status_code", None), getattr(exc, "body", None)
    out: BaseException | None = None
    if status is not None and body is not None:
        out = status_error(client, status, body, url)
    elif transport and isinstance(exc.__cause__, httpx.HTTPError):
        try:
            out = transport_error(url, isinstance(exc.__cause__, httpx.TimeoutException))
        except Exception:  # noqa: BLE001 - no openai installed: keep Ayo's error
            log.debug("could not build the openai SDK's connection error", exc_info=True)
    if out is not None and out is not exc:
        out.add_note(f"Ayo: {exc}")
    return out
