"""The :class:`Embedder` protocol: texts in, one vector per text out, in order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["Embedder"]


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into vectors.

    ``embed`` returns one vector per text, in the order of ``texts``; an empty input
    gives an empty list without a request. ``model`` names the model and
    ``dimensions`` the vector length when it is known in advance (else ``None``).
    """

    model: str
    dimensions: int | None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in input order."""
        ...
