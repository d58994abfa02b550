"""Chat front ends talk to operative: the Vercel AI SDK (``useChat``) and AG-UI.

:func:`asgi_app` serves an agent to both (and to operative's own chat page); hosts with
their own server mount the parts: :func:`parse_vercel_request` and
:func:`vercel_ai_stream` (with :data:`VERCEL_HEADERS`) for the AI SDK,
:func:`parse_agui_input` and :func:`agui_stream` (or the whole :func:`agui_endpoint`) for
AG-UI (:func:`serve_agent` gives the agent as they run it).
"""

from ._agui import (
    AguiEncoder,
    AguiInput,
    AguiInputError,
    agui_endpoint,
    agui_stream,
    frontend_tools,
    parse_agui_input,
)
from ._app import UIApp, asgi_app
from ._served import ClientMessageError, ServedAgent, serve_agent
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
    "AguiEncoder",
    "AguiInput",
    "AguiInputError",
    "ClientMessageError",
    "ServedAgent",
    "UIApp",
    "VercelChatRequest",
    "VercelDecision",
    "VercelEncoder",
    "VercelRequestError",
    "agui_endpoint",
    "agui_stream",
    "approval_signature",
    "asgi_app",
    "frontend_tools",
    "parse_agui_input",
    "parse_vercel_request",
    "serve_agent",
    "vercel_ai_stream",
    "vercel_chunks",
]
