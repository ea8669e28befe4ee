"""Internals of the openai SDK that Ayo's adapters touch, each declared once in the touchpoint register."""

from __future__ import annotations

from typing import Any

from ayo_shims.touchpoints import declare, has_attr

# -- used by ayo_llamaindex

OPENAI_SDK_CHECKED = "2.x (checked 2.54.0)"

declare("openai.OpenAI._make_status_error_from_response", framework="openai", checked=OPENAI_SDK_CHECKED,
        why="a server error on Ayo's request is re-raised as the SDK's own exception (same class and message)",
        check=has_attr("openai", "OpenAI", "_make_status_error_from_response"))


def status_error_from_response(client: Any, response: Any) -> BaseException:
    """The ``openai.APIStatusError`` subclass ``client`` raises for the httpx ``response``."""
    return client._make_status_error_from_response(response)
