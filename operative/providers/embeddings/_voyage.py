"""``voyage_embedder``: Voyage AI's ``POST /embeddings`` over ``httpx`` (no SDK)."""

from __future__ import annotations

import os
from typing import Any

import httpx

from ..._core._errors import InvalidArgument
from ...retry import RetryOptions
from ._batching import HttpEmbedder
from ._openai import read_data

__all__ = ["VoyageEmbedder", "voyage_embedder"]


class VoyageEmbedder(HttpEmbedder):
    """The embedder :func:`voyage_embedder` returns."""

    provider = "voyage"
    key_variable = "VOYAGE_API_KEY"

    def __init__(self, *, api_key: str | None, input_type: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._api_key = api_key
        self.input_type = input_type

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        key = self._api_key or os.environ.get(self.key_variable)
        if not key:
            raise self._missing_key()
        body: dict[str, Any] = {"input": texts, "model": self.model}
        if self.input_type is not None:
            body["input_type"] = self.input_type
        if self.dimensions is not None:
            body["output_dimension"] = self.dimensions
        reply = await self._post(
            f"{self.base_url}/embeddings", body, {"authorization": f"Bearer {key}"}
        )
        return read_data(reply, self.provider, self.model)


def voyage_embedder(
    *,
    model: str,
    api_key: str | None = None,
    base_url: str = "https://api.voyageai.com/v1",
    input_type: str | None = None,
    http_client: httpx.AsyncClient | None = None,
    dimensions: int | None = None,
    batch_size: int = 128,
    max_concurrency: int = 4,
    retry: RetryOptions | None = None,
    timeout: float | None = 60.0,
) -> VoyageEmbedder:
    """An :class:`Embedder` over Voyage AI's ``/embeddings``.

    Args:
        model: e.g. ``"voyage-3.5"``.
        api_key: Sent as a bearer token; default ``VOYAGE_API_KEY`` (read at each call).
        base_url: The API root (``/embeddings`` is appended).
        input_type: ``"query"`` or ``"document"`` (Voyage prepends a retrieval prompt),
            or ``None`` for plain embeddings.
        http_client: An ``httpx.AsyncClient`` you own and close.
        dimensions: Sent as ``output_dimension`` (models that support it).
        batch_size: Texts per request (Voyage accepts up to 1000).
        max_concurrency: Requests in flight at once.
        retry: Retry each failed batch per these options (``retry_after`` honoured).
        timeout: Seconds for the client the embedder makes.
    """
    if input_type not in (None, "query", "document"):
        raise InvalidArgument(f"input_type must be 'query', 'document' or None, got {input_type!r}")
    return VoyageEmbedder(
        model=model,
        api_key=api_key,
        input_type=input_type,
        base_url=base_url,
        http_client=http_client,
        dimensions=dimensions,
        batch_size=batch_size,
        max_concurrency=max_concurrency,
        retry=retry,
        timeout=timeout,
    )
