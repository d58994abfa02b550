"""Names the command's parser needs, kept apart so ``operative --help`` imports nothing heavy."""

from __future__ import annotations

__all__ = ["DEMO_PROMPT", "OFFLINE_MODEL"]

OFFLINE_MODEL = "offline-scripted"
"""The model name the offline stand-in reports (it has no price: it costs nothing)."""

DEMO_PROMPT = "What is the weather in Lisbon, and what is 17 * 23 + 4?"
