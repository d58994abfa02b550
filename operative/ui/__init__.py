"""Chat front ends talk to operative: the Vercel AI SDK (``useChat``) and AG-UI.

:func:`asgi_app` serves an agent to both (and to operative's own chat page); hosts with
their own server mount the parts: :func:`parse_vercel_request` and
:func:`vercel_ai_stream` (with :data:`VERCEL_HEADERS`) for the AI SDK.
"""

from ._app import UIApp, asgi_app
from ._vercel import (
    VERCEL_HEADERS,
    VercelChatRequest,
    VercelDecision,
    VercelEncoder,
    VercelRequestError,
    approval_signature,
    parse_vercel_request,
    vercel_ai_stream,
    vercel_chunks,
)

__all__ = [
    "VERCEL_HEADERS",
    "UIApp",
    "VercelChatRequest",
    "VercelDecision",
    "VercelEncoder",
    "VercelRequestError",
    "approval_signature",
    "asgi_app",
    "parse_vercel_request",
    "vercel_ai_stream",
    "vercel_chunks",
]
