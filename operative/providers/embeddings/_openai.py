"""``openai_embedder``: OpenAI's ``POST /embeddings`` over ``httpx`` (no SDK)."""

from __future__ import annotations

import os
from typing import Any

import httpx

from ..._core._errors import ProviderError
from ...retry import RetryOptions
from ._batching import HttpEmbedder, floats

__all__ = ["OpenAIEmbedder", "openai_embedder", "read_data"]


def read_data(reply: dict[str, Any], provider: str, model: str) -> list[list[float]]:
    """The vectors of an OpenAI-shaped reply (``data[].embedding``), ordered by ``index``."""
    data = reply.get("data")
    if not isinstance(data, list):
        raise ProviderError(
            f"{provider} ({model}): the reply has no data list", provider=provider, model=model
        )
    items = [item for item in data if isinstance(item, dict)]
    if all(isinstance(item.get("index"), int) for item in items):
        items.sort(key=lambda item: int(item["index"]))
    return [floats(item.get("embedding")) for item in items]


class OpenAIEmbedder(HttpEmbedder):
    """The embedder :func:`openai_embedder` returns."""

    provider = "openai"
    key_variable = "OPENAI_API_KEY"

    def __init__(self, *, api_key: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._api_key = api_key

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        key = self._api_key or os.environ.get(self.key_variable)
        if not key:
            raise self._missing_key()
        body: dict[str, Any] = {"input": texts, "model": self.model, "encoding_format": "float"}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        reply = await self._post(
            f"{self.base_url}/embeddings", body, {"authorization": f"Bearer {key}"}
        )
        return read_data(reply, self.provider, self.model)


def openai_embedder(
    *,
    model: str,
    api_key: str | None = None,
    base_url: str = "https://api.openai.com/v1",
    http_client: httpx.AsyncClient | None = None,
    dimensions: int | None = None,
    batch_size: int = 2048,
    max_concurrency: int = 4,
    retry: RetryOptions | None = None,
    timeout: float | None = 60.0,
) -> OpenAIEmbedder:
    """An :class:`Embedder` over OpenAI's (or any compatible server's) ``/embeddings``.

    Args:
        model: e.g. ``"text-embedding-3-small"``.
        api_key: Sent as a bearer token; default ``OPENAI_API_KEY`` (read at each call).
        base_url: The API root (``/embeddings`` is appended).
        http_client: An ``httpx.AsyncClient`` you own and close; without it the embedder
            makes one on first use and closes it in ``aclose()``.
        dimensions: Shorten the vectors (``text-embedding-3-*``); sent as ``dimensions``.
        batch_size: Texts per request (OpenAI accepts up to 2048).
        max_concurrency: Requests in flight at once.
        retry: Retry each failed batch per these options (``retry_after`` honoured).
        timeout: Seconds for the client the embedder makes.
    """
    return OpenAIEmbedder(
        model=model,
        api_key=api_key,
        base_url=base_url,
        http_client=http_client,
        dimensions=dimensions,
        batch_size=batch_size,
        max_concurrency=max_concurrency,
        retry=retry,
        timeout=timeout,
    )
