"""``gemini_embedder``: Gemini's ``batchEmbedContents`` over ``httpx`` (no SDK)."""

from __future__ import annotations

import os
from typing import Any

import httpx

from ..._core._errors import ProviderAuthenticationError, ProviderError
from ...retry import RetryOptions
from ._batching import HttpEmbedder, floats

__all__ = ["GeminiEmbedder", "gemini_embedder"]

KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


class GeminiEmbedder(HttpEmbedder):
    """The embedder :func:`gemini_embedder` returns."""

    provider = "gemini"
    key_variable = "GEMINI_API_KEY (or GOOGLE_API_KEY)"

    def __init__(self, *, api_key: str | None, task_type: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._api_key = api_key
        self.task_type = task_type

    def _key(self) -> str:
        key = self._api_key
        for variable in KEY_VARIABLES:
            key = key or os.environ.get(variable)
        if not key:
            raise ProviderAuthenticationError(
                "no gemini API key: set the GEMINI_API_KEY (or GOOGLE_API_KEY) environment "
                "variable, or pass api_key=",
                provider=self.provider,
                model=self.model,
            )
        return key

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        key = self._key()
        model = self.model
        name = model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"
        requests: list[dict[str, Any]] = []
        for text in texts:
            entry: dict[str, Any] = {"model": name, "content": {"parts": [{"text": text}]}}
            if self.task_type is not None:
                entry["taskType"] = self.task_type
            if self.dimensions is not None:
                entry["outputDimensionality"] = self.dimensions
            requests.append(entry)
        reply = await self._post(
            f"{self.base_url}/v1beta/{name}:batchEmbedContents",
            {"requests": requests},
            {"x-goog-api-key": key},
        )
        embeddings = reply.get("embeddings")
        if not isinstance(embeddings, list):
            raise ProviderError(
                f"gemini ({model}): the reply has no embeddings list",
                provider=self.provider,
                model=model,
            )
        return [
            floats(item.get("values") if isinstance(item, dict) else None) for item in embeddings
        ]


def gemini_embedder(
    *,
    model: str,
    api_key: str | None = None,
    base_url: str = "https://generativelanguage.googleapis.com",
    http_client: httpx.AsyncClient | None = None,
    dimensions: int | None = None,
    task_type: str | None = None,
    batch_size: int = 100,
    max_concurrency: int = 4,
    retry: RetryOptions | None = None,
    timeout: float | None = 60.0,
) -> GeminiEmbedder:
    """An :class:`Embedder` over Gemini's ``models/{model}:batchEmbedContents``.

    Args:
        model: e.g. ``"gemini-embedding-001"`` (``models/`` is added when missing).
        api_key: Sent in ``x-goog-api-key``; default ``GEMINI_API_KEY``, then
            ``GOOGLE_API_KEY`` (read at each call).
        base_url: The API root (``/v1beta/models/{model}:batchEmbedContents`` is appended).
        http_client: An ``httpx.AsyncClient`` you own and close.
        dimensions: Sent as each request's ``outputDimensionality``.
        task_type: Sent as ``taskType`` (``"RETRIEVAL_QUERY"``, ``"RETRIEVAL_DOCUMENT"``,
            ``"SEMANTIC_SIMILARITY"``, ...).
        batch_size: Texts per request (the API accepts up to 100).
        max_concurrency: Requests in flight at once.
        retry: Retry each failed batch per these options (``retry_after`` honoured).
        timeout: Seconds for the client the embedder makes.
    """
    return GeminiEmbedder(
        model=model,
        api_key=api_key,
        task_type=task_type,
        base_url=base_url,
        http_client=http_client,
        dimensions=dimensions,
        batch_size=batch_size,
        max_concurrency=max_concurrency,
        retry=retry,
        timeout=timeout,
    )
