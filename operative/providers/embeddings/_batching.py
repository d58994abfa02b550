"""What every HTTP embedder shares: client ownership, batching, retry, error mapping."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import httpx
import trio

from ..._core._errors import InvalidArgument, ProviderAuthenticationError, ProviderError
from ...retry import RetryOptions
from .._errors import connection_error, status_error, timeout_error

__all__ = ["HttpEmbedder", "embed_in_batches", "positive_int", "with_retry"]


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an int >= 1, else :class:`InvalidArgument` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"{name} must be an int >= 1, got {value!r}")
    return value


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list, refusing a bare string and non-string items."""
    if isinstance(texts, str | bytes):
        raise InvalidArgument("embed() takes a sequence of texts; wrap a single text in a list")
    items = list(texts)
    for item in items:
        if not isinstance(item, str):
            raise InvalidArgument(f"embed() takes str texts, got {type(item).__name__}")
    return items


async def with_retry(
    call: Callable[[], Awaitable[list[list[float]]]], retry: RetryOptions | None
) -> list[list[float]]:
    """Run ``call``; on a failure ``retry`` deems transient, wait on trio's clock and retry.

    The wait honours the error's ``retry_after`` (see :meth:`RetryOptions.delay`);
    ``attempt_timeout`` bounds each attempt (``trio.TooSlowError``, transient).
    """
    attempt = 1
    while True:
        try:
            if retry is not None and retry.attempt_timeout is not None:
                with trio.fail_after(retry.attempt_timeout):
                    return await call()
            return await call()
        except Exception as error:
            if retry is None or not retry.should_retry(error, attempt):
                raise
            delay = retry.delay(attempt, error)
        await trio.sleep(delay)
        attempt += 1


async def embed_in_batches(
    texts: Sequence[str],
    embed_batch: Callable[[list[str]], Awaitable[list[list[float]]]],
    *,
    batch_size: int,
    max_concurrency: int,
    retry: RetryOptions | None,
) -> list[list[float]]:
    """Split ``texts`` into batches, embed them concurrently (at most ``max_concurrency``
    in flight), and reassemble the vectors in input order.

    The batches run in one nursery: the first to fail cancels the rest and its error is
    raised (unwrapped when it is the only one).
    """
    items = check_texts(texts)
    if not items:
        await trio.lowlevel.checkpoint()
        return []
    batches = [items[i : i + batch_size] for i in range(0, len(items), batch_size)]
    if len(batches) == 1:
        return await _one(batches[0], embed_batch, retry)
    results: list[list[list[float]] | None] = [None] * len(batches)
    limiter = trio.CapacityLimiter(max_concurrency)

    async def run(index: int) -> None:
        async with limiter:
            results[index] = await _one(batches[index], embed_batch, retry)

    try:
        async with trio.open_nursery() as nursery:
            for index in range(len(batches)):
                nursery.start_soon(run, index)
    except BaseExceptionGroup as group:
        # Siblings end with Cancelled, which the nursery absorbs: one real failure is
        # left, and it is raised as itself so callers can catch ProviderError.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    vectors: list[list[float]] = []
    for batch in results:
        assert batch is not None
        vectors.extend(batch)
    return vectors


async def _one(
    batch: list[str],
    embed_batch: Callable[[list[str]], Awaitable[list[list[float]]]],
    retry: RetryOptions | None,
) -> list[list[float]]:
    vectors = await with_retry(lambda: embed_batch(batch), retry)
    if len(vectors) != len(batch):
        raise ProviderError(
            f"the embedding service returned {len(vectors)} vectors for {len(batch)} texts"
        )
    return vectors


def floats(value: Any) -> list[float]:
    """One vector from JSON, checked to be a list of numbers."""
    if not isinstance(value, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in value
    ):
        raise ProviderError(f"an embedding is not a list of numbers: {str(value)[:80]}")
    return [float(x) for x in value]


class HttpEmbedder:
    """An :class:`~operative.providers.embeddings.Embedder` over one ``httpx`` client.

    Pass ``http_client=`` to keep ownership (you close it). Otherwise the embedder makes
    a client on first use and closes it in :meth:`aclose` (or when an ``async with``
    block around it ends). Subclasses implement :meth:`_embed_batch`.
    """

    provider: str = ""
    key_variable: str = ""

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        dimensions: int | None,
        http_client: httpx.AsyncClient | None,
        timeout: float | None,
        batch_size: int,
        max_concurrency: int,
        retry: RetryOptions | None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidArgument(f"{self.provider} embedder needs a model name, got {model!r}")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidArgument(f"base_url must be an http(s) URL, got {base_url!r}")
        if dimensions is not None:
            positive_int("dimensions", dimensions)
        if http_client is not None and not isinstance(http_client, httpx.AsyncClient):
            raise InvalidArgument(
                f"http_client must be an httpx.AsyncClient, got {type(http_client).__name__}"
            )
        if retry is not None and not isinstance(retry, RetryOptions):
            raise InvalidArgument(f"retry must be RetryOptions or None, got {retry!r}")
        self.model = model
        self.dimensions = dimensions
        self.base_url = base_url.rstrip("/")
        self.batch_size = positive_int("batch_size", batch_size)
        self.max_concurrency = positive_int("max_concurrency", max_concurrency)
        self.retry = retry
        self._timeout = timeout
        self._client = http_client
        self._owns_client = http_client is None
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def client(self) -> httpx.AsyncClient:
        """The ``httpx`` client (made now if the embedder owns it and has none yet)."""
        if self._closed:
            raise InvalidArgument(f"this {self.provider} embedder has been closed")
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout)
        return self._client

    @property
    def owns_client(self) -> bool:
        """Whether :meth:`aclose` closes the client (True when none was given)."""
        return self._owns_client

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in input order (batched, concurrent, retried)."""
        return await embed_in_batches(
            texts,
            self._embed_batch,
            batch_size=self.batch_size,
            max_concurrency=self.max_concurrency,
            retry=self.retry,
        )

    async def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        """The same as :meth:`embed`."""
        return await self.embed(texts)

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    def _missing_key(self) -> ProviderAuthenticationError:
        return ProviderAuthenticationError(
            f"no {self.provider} API key: set the {self.key_variable} environment variable, "
            "or pass api_key=",
            provider=self.provider,
            model=self.model,
        )

    async def _post(
        self, url: str, body: Mapping[str, Any], headers: Mapping[str, str]
    ) -> dict[str, Any]:
        """POST ``body`` as JSON; the reply object, or a typed :class:`ProviderError`."""
        client = self.client
        try:
            response = await client.post(url, json=body, headers=dict(headers))
        except httpx.TimeoutException as error:
            raise timeout_error(
                provider=self.provider, model=self.model, detail=str(error)
            ) from error
        except httpx.TransportError as error:
            raise connection_error(
                provider=self.provider,
                model=self.model,
                detail=f"the connection was cut: {error!r}",
            ) from error
        if response.status_code >= 400:
            raise status_error(
                provider=self.provider,
                model=self.model,
                status=response.status_code,
                message=_message(response),
                headers=response.headers,
                request_id=response.headers.get("x-request-id")
                or response.headers.get("request-id"),
                key_variable=self.key_variable,
            )
        try:
            reply = response.json()
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise ProviderError(
                f"{self.provider} ({self.model}): unexpected reply {response.text[:200]!r}",
                provider=self.provider,
                model=self.model,
            )
        return reply

    async def aclose(self) -> None:
        """Close the client if this embedder made it; calling again does nothing."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        client, self._client = self._client, None
        if client is None or not self._owns_client:
            await trio.lowlevel.checkpoint()
            return
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            await client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _message(response: httpx.Response) -> str:
    """The vendor's message from an error body (OpenAI, Gemini, Voyage, Ollama shapes)."""
    text = response.text or response.reason_phrase
    try:
        body = response.json()
    except ValueError:
        return text
    if not isinstance(body, dict):
        return text
    error = body.get("error")
    if isinstance(error, Mapping):
        message = str(error.get("message") or text)
        status = error.get("status")
        return f"{status}: {message}" if isinstance(status, str) and status else message
    if isinstance(error, str):
        return error
    detail = body.get("detail")
    if isinstance(detail, str):
        return detail
    return text
