"""``ollama_embedder``: Ollama's ``POST /api/embed`` over ``httpx``."""

from __future__ import annotations

import os
from typing import Any

import httpx

from ..._core._errors import ProviderError
from ...retry import RetryOptions
from ._batching import HttpEmbedder, floats

__all__ = ["OllamaEmbedder", "ollama_embedder"]


class OllamaEmbedder(HttpEmbedder):
    """The embedder :func:`ollama_embedder` returns."""

    provider = "ollama"
    key_variable = "OLLAMA_API_KEY"

    def __init__(
        self, *, api_key: str | None, keep_alive: str | None, truncate: bool | None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._api_key = api_key
        self.keep_alive = keep_alive
        self.truncate = truncate

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        if self.truncate is not None:
            body["truncate"] = self.truncate
        key = self._api_key or os.environ.get(self.key_variable)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        reply = await self._post(f"{self.base_url}/api/embed", body, headers)
        embeddings = reply.get("embeddings")
        if not isinstance(embeddings, list):
            raise ProviderError(
                f"ollama ({self.model}): the reply has no embeddings list",
                provider=self.provider,
                model=self.model,
            )
        return [floats(vector) for vector in embeddings]


def ollama_embedder(
    *,
    model: str,
    base_url: str = "http://127.0.0.1:11434",
    http_client: httpx.AsyncClient | None = None,
    api_key: str | None = None,
    dimensions: int | None = None,
    keep_alive: str | None = None,
    truncate: bool | None = None,
    batch_size: int = 64,
    max_concurrency: int = 4,
    retry: RetryOptions | None = None,
    timeout: float | None = 600.0,
) -> OllamaEmbedder:
    """An :class:`Embedder` over Ollama's ``/api/embed`` (``input`` as a list).

    Args:
        model: e.g. ``"nomic-embed-text"``.
        base_url: The Ollama server (``/api/embed`` is appended).
        http_client: An ``httpx.AsyncClient`` you own and close.
        api_key: Sent as a bearer token when given (default ``OLLAMA_API_KEY`` if set).
        dimensions: Sent as ``dimensions`` (models that support truncation).
        keep_alive: How long the server keeps the model loaded (e.g. ``"10m"``).
        truncate: Whether the server truncates texts past the context (its default: yes).
        batch_size: Texts per request.
        max_concurrency: Requests in flight at once.
        retry: Retry each failed batch per these options (``retry_after`` honoured).
        timeout: Seconds for the client the embedder makes (a cold model load is slow).
    """
    return OllamaEmbedder(
        model=model,
        api_key=api_key,
        keep_alive=keep_alive,
        truncate=truncate,
        base_url=base_url,
        http_client=http_client,
        dimensions=dimensions,
        batch_size=batch_size,
        max_concurrency=max_concurrency,
        retry=retry,
        timeout=timeout,
    )
