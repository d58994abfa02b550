"""The base of adapters that speak a REST API through a plain ``httpx`` client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from ._common import ClientAdapter, DeltaCallback

__all__ = ["HttpxAdapter"]


class HttpxAdapter(ClientAdapter[httpx.AsyncClient]):
    """A generate function over an ``httpx.AsyncClient`` it may own (Gemini, Ollama)."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        http_client: httpx.AsyncClient | None,
        api_key: str | None,
        timeout: float | None,
        stream: bool,
        on_delta: DeltaCallback | None,
        settings: Mapping[str, Any],
    ) -> None:
        def make_client() -> httpx.AsyncClient:
            return httpx.AsyncClient(timeout=timeout)

        super().__init__(client=http_client, make_client=make_client)
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._defaults: dict[str, Any] = {"model": model, **settings}
        self._stream = stream
        self._on_delta = on_delta

    async def _close_client(self, client: httpx.AsyncClient) -> None:
        await client.aclose()
