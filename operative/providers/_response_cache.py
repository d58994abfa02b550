"""``cached``: a generate function that answers repeated requests from a store.

The key is the SHA-256 of a canonical msgspec JSON encoding of what decides the answer:
the wrapped provider's name, the request's settings (sorted; minus the keys listed in
:data:`UNKEYED_SETTINGS`), the messages without their ids, the tool specs and the output
schema. Tool-call ids are renumbered in order of first appearance, because providers
mint new ones on every call; message metadata that only carries bookkeeping or
prompt-caching hints (``operative.*`` keys, ``anthropic.cache_control``) is left out.

Expiry is wall-clock time (seconds since the epoch): entries outlive the process and are
shared through SQLite or PostgreSQL with other processes, whose trio clocks have other
origins. *Now* is the wall clock read once, when the cache is first used, advanced by
trio's clock from then on: so ``MockClock`` moves it in tests, and a wall-clock step
during the process's life (an NTP correction) neither expires entries early nor keeps
them forever.

Concurrent identical requests in one process make one provider call: the first caller
makes it, the others wait for its answer and share it (no task is spawned; if the first
caller fails or is cancelled, the next waiter makes the call itself).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import msgspec
import trio

from .._core._codec import decode
from .._core._errors import CorruptRecordError, InvalidArgument, SchemaVersionError
from .._core._model import GenerateFunction, GenerateRequest, GenerateResponse
from .._core._types import Usage
from ..kvstore import ConditionalTextValueStore, Delete, Put
from ._fallover import provider_name

__all__ = [
    "CACHE_METADATA_KEY",
    "CACHE_SETTING",
    "UNKEYED_SETTINGS",
    "CacheMode",
    "CachedResponse",
    "ResponseCache",
    "cached",
    "default_cacheable",
    "response_cache_key",
    "response_key_material",
]

logger = logging.getLogger("operative.providers.cache")

CACHE_SETTING: Final = "response_cache"
"""Request setting read (and removed) by the cache: ``"use"`` (the default),
``"bypass"`` (neither read nor write) or ``"refresh"`` (call the provider, store the
answer). Distinct from ``"cache"``, which is Anthropic's prompt caching."""

CACHE_METADATA_KEY: Final = "operative.cache"
"""Response metadata key: ``"hit"``, ``"miss"`` (stored), ``"bypass"`` or ``"refresh"``."""

UNKEYED_SETTINGS: Final = frozenset({CACHE_SETTING, "cache", "stream"})
"""Settings that change how an answer is fetched or billed, never what it says: the
cache's own switch, provider prompt-caching hints, and streaming."""

_UNKEYED_METADATA = ("operative.", "anthropic.cache_control")

CacheMode = Literal["use", "bypass", "refresh"]

_SCHEMA_VERSION = 1


class CachedResponse(msgspec.Struct, frozen=True, kw_only=True):
    """One stored answer (the value under a cache key)."""

    schema_version: int = _SCHEMA_VERSION
    stored_at: float
    """Wall-clock seconds since the epoch."""
    expires_at: float | None = None
    """Wall-clock seconds since the epoch; ``None``: never."""
    response: GenerateResponse


def _canonical_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if not k.startswith(_UNKEYED_METADATA)}


def response_key_material(request: GenerateRequest, *, name: str = "") -> dict[str, Any]:
    """What the default key hashes: everything that decides the answer, nothing else."""
    call_ids: dict[str, str] = {}

    def renumber(call_id: str | None) -> str | None:
        if call_id is None:
            return None
        return call_ids.setdefault(call_id, f"call-{len(call_ids)}")

    messages: list[dict[str, Any]] = []
    for message in request.conversation.messages:
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            entry["tool_calls"] = [
                {"id": renumber(c.id), "name": c.name, "arguments": c.arguments}
                for c in message.tool_calls
            ]
        if message.tool_call_id is not None:
            entry["tool_call_id"] = renumber(message.tool_call_id)
            entry["tool_name"] = message.tool_name
            entry["outcome"] = message.outcome
        metadata = _canonical_metadata(message.metadata)
        if metadata:
            entry["metadata"] = metadata
        messages.append(entry)
    settings = {k: v for k, v in request.settings.items() if k not in UNKEYED_SETTINGS}
    return {
        "v": _SCHEMA_VERSION,
        "provider": name,
        "settings": settings,
        "messages": messages,
        "tools": list(request.tools),
        "output_schema": request.output_schema,
    }


_key_encoder = msgspec.json.Encoder(order="sorted")


def response_cache_key(material: object, *, prefix: str = "operative.cache/") -> str:
    """``prefix`` + the SHA-256 (hex) of ``material``'s canonical JSON (keys sorted).

    Raises:
        InvalidArgument: ``material`` holds a value JSON cannot represent.
    """
    try:
        encoded = _key_encoder.encode(material)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(
            f"cannot build a cache key: {exc}; settings, metadata and key= material must be "
            "JSON-encodable (or pass response_cache='bypass' for this request)"
        ) from exc
    return prefix + hashlib.sha256(encoded).hexdigest()


def default_cacheable(response: GenerateResponse) -> bool:
    """Store answers that say something: text or tool calls (an empty one may be a fluke)."""
    return bool(response.content or response.tool_calls)


class _Flight:
    """One provider call in progress for a key; waiters park on ``done``."""

    __slots__ = ("done", "response")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.response: GenerateResponse | None = None


class ResponseCache:
    """A ``GenerateFunction`` answering repeated requests from a store; see :func:`cached`."""

    __slots__ = (
        "_anchor",
        "_bypass",
        "_cacheable",
        "_clock",
        "_flights",
        "_key",
        "_stats",
        "generate",
        "name",
        "prefix",
        "store",
        "ttl",
    )

    def __init__(
        self,
        generate: GenerateFunction,
        *,
        store: ConditionalTextValueStore,
        ttl: float | None,
        key: Callable[[GenerateRequest], object] | None,
        bypass: Callable[[GenerateRequest], bool] | None,
        cacheable: Callable[[GenerateResponse], bool],
        prefix: str,
        clock: Callable[[], float] | None,
    ) -> None:
        self.generate = generate
        self.store = store
        self.ttl = ttl
        self.prefix = prefix
        self._key = key
        self._bypass = bypass
        self._cacheable = cacheable
        self._clock = clock
        self._anchor: tuple[float, float] | None = None
        self._flights: dict[str, _Flight] = {}
        self._stats = dict.fromkeys(
            ("hits", "misses", "coalesced", "bypassed", "refreshed", "stored", "corrupt"), 0
        )
        self.name = f"cached({provider_name(generate)})"
        """How fallovers, routes and instrumentation name this generate function."""

    def __repr__(self) -> str:
        return f"<ResponseCache {self.name} ttl={self.ttl!r} {self.store!r}>"

    @property
    def provider(self) -> object:
        return getattr(self.generate, "provider", None)

    @property
    def model(self) -> object:
        return getattr(self.generate, "model", None)

    def statistics(self) -> dict[str, int]:
        """Counters: hits, misses, coalesced waits, bypasses, refreshes, stores, corrupt
        records, and calls in flight now."""
        return {**self._stats, "in_flight": len(self._flights)}

    def now(self) -> float:
        """Wall-clock seconds since the epoch, advanced by trio's clock (see module doc)."""
        if self._clock is not None:
            return self._clock()
        if self._anchor is None:
            self._anchor = (time.time(), trio.current_time())
        wall, origin = self._anchor
        return wall + (trio.current_time() - origin)

    def key_for(self, request: GenerateRequest) -> str:
        """The store key ``request`` is cached under."""
        material = (
            response_key_material(request, name=provider_name(self.generate))
            if self._key is None
            else self._key(request)
        )
        return response_cache_key(material, prefix=self.prefix)

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        settings = request.settings
        mode: object = settings.get(CACHE_SETTING, "use")
        if mode not in ("use", "bypass", "refresh"):
            raise InvalidArgument(
                f"settings[{CACHE_SETTING!r}] takes 'use', 'bypass' or 'refresh', got {mode!r}"
            )
        if CACHE_SETTING in settings:
            rest = {k: v for k, v in settings.items() if k != CACHE_SETTING}
            request = msgspec.structs.replace(request, settings=rest)
        if mode == "use" and self._bypass is not None and self._bypass(request):
            mode = "bypass"
        if mode == "bypass":
            self._stats["bypassed"] += 1
            return _mark(await self.generate(request), "bypass")
        try:
            key = self.key_for(request)
        except InvalidArgument:
            logger.warning("request not cached: its key material is not JSON", exc_info=True)
            self._stats["bypassed"] += 1
            return _mark(await self.generate(request), "bypass")
        if mode == "refresh":
            self._stats["refreshed"] += 1
            response = await self.generate(request)
            await self._store(key, response)
            return _mark(response, "refresh")
        while True:
            flight = self._flights.get(key)
            if flight is None:
                break
            await flight.done.wait()
            if flight.response is not None:
                self._stats["coalesced"] += 1
                return _mark(flight.response, "hit", usage=Usage())
            # The caller ahead of us failed or was cancelled: look again, maybe lead.
        # The flight exists from before the store is read until the answer is stored, so
        # a concurrent identical request never reads a stale miss and calls again.
        flight = self._flights[key] = _Flight()
        try:
            hit = await self._lookup(key)
            if hit is not None:
                self._stats["hits"] += 1
                flight.response = hit
                return _mark(hit, "hit", usage=Usage())
            response = await self.generate(request)
            self._stats["misses"] += 1
            flight.response = response
            await self._store(key, response)
        finally:
            del self._flights[key]
            flight.done.set()
        return _mark(response, "miss")

    async def _lookup(self, key: str) -> GenerateResponse | None:
        try:
            stored = await self.store.get(key)
        except Exception:
            logger.warning("cache read of %s failed; treated as a miss", key, exc_info=True)
            return None
        if stored is None:
            return None
        try:
            record = decode(stored.value, CachedResponse, what="cached response")
        except SchemaVersionError:
            return None  # a newer operative wrote it: leave it alone
        except CorruptRecordError as exc:
            self._stats["corrupt"] += 1
            logger.warning("corrupt cache record under %s treated as a miss: %s", key, exc)
            return None
        if record.expires_at is not None and self.now() >= record.expires_at:
            return None
        return record.response

    async def _store(self, key: str, response: GenerateResponse) -> bool:
        """Store ``response`` if it is cacheable; True when it was stored."""
        if not self._cacheable(response):
            return False
        now = self.now()
        record = CachedResponse(
            stored_at=now,
            expires_at=None if self.ttl is None else now + self.ttl,
            response=_mark(response, None),
        )
        try:
            value = msgspec.json.encode(record).decode()
            await self.store.conditional_batch([Put(key=key, value=value)])
        except Exception:
            logger.warning("cache write of %s failed; the answer is not cached", key, exc_info=True)
            return False
        self._stats["stored"] += 1
        return True

    async def purge_expired(self) -> int:
        """Delete this cache's expired (and corrupt) records; returns how many."""
        removed = 0
        after: str | None = None
        now = self.now()
        while True:
            page = await self.store.list(self.prefix, limit=200, after=after)
            if not page:
                return removed
            for item in page:
                try:
                    record = decode(item.value, CachedResponse, what="cached response")
                except SchemaVersionError:
                    continue
                except CorruptRecordError:
                    record = None
                if record is None or (record.expires_at is not None and now >= record.expires_at):
                    try:
                        await self.store.conditional_batch(
                            [Delete(key=item.key, expected_version=item.version)]
                        )
                    except Exception:
                        logger.debug("purge of %s skipped (changed meanwhile)", item.key)
                        continue
                    removed += 1
            after = page[-1].key

    async def aclose(self) -> None:
        """Close the wrapped generate function if it holds resources (not the store)."""
        close: Any = getattr(self.generate, "aclose", None)
        if close is not None:
            await close()
        else:
            await trio.lowlevel.checkpoint()


def _mark(
    response: GenerateResponse, how: str | None, *, usage: Usage | None = None
) -> GenerateResponse:
    metadata = {k: v for k, v in response.metadata.items() if k != CACHE_METADATA_KEY}
    if how is not None:
        metadata[CACHE_METADATA_KEY] = how
    if usage is None:
        return msgspec.structs.replace(response, metadata=metadata)
    return msgspec.structs.replace(response, metadata=metadata, usage=usage)


def cached(
    generate: GenerateFunction,
    *,
    store: ConditionalTextValueStore,
    ttl: float | None = 3600.0,
    key: Callable[[GenerateRequest], object] | None = None,
    bypass: Callable[[GenerateRequest], bool] | None = None,
    cacheable: Callable[[GenerateResponse], bool] = default_cacheable,
    prefix: str = "operative.cache/",
    clock: Callable[[], float] | None = None,
) -> ResponseCache:
    """Wrap ``generate`` so that identical requests are answered from ``store``.

    Args:
        generate: The generate function to call on a miss.
        store: Where answers live (``MemoryStore``, ``SqliteStore``, ``PostgresStore``).
        ttl: Seconds an answer stays fresh (``None``: forever).
        key: ``request -> material`` replacing :func:`response_key_material` (the
            material is hashed; it must be JSON-encodable).
        bypass: ``request -> bool``: True sends that request straight to ``generate``.
            Per request, ``settings["response_cache"]`` may also say ``"bypass"`` or
            ``"refresh"``; the cache removes that setting before calling ``generate``.
        cacheable: ``response -> bool``: whether an answer is stored (default: it has
            text or tool calls). Errors raised by ``generate`` are never stored.
        prefix: Key prefix in the store (share a store between caches by varying it).
        clock: Wall-clock seconds since the epoch (default: the wall clock read once,
            then advanced by trio's clock).

    Returns a :class:`ResponseCache`. A hit has ``usage == Usage()`` (no tokens were
    spent) and ``metadata["operative.cache"] == "hit"``; a fresh answer says ``"miss"``.
    Store failures and corrupt records are logged to ``operative.providers.cache`` and
    treated as misses: the cache never fails a request the provider could answer.
    Provider prompt-caching hints (``settings["cache"]``, message metadata
    ``"anthropic.cache_control"``) are passed through to ``generate`` unchanged.
    """
    if not callable(generate):
        raise InvalidArgument(f"cached() takes a generate function, got {generate!r}")
    if not isinstance(store, ConditionalTextValueStore):
        raise InvalidArgument(
            f"store= takes a ConditionalTextValueStore (e.g. MemoryStore()), got {store!r}"
        )
    if ttl is not None and (
        isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl)
    ):
        raise InvalidArgument(f"ttl= takes a positive number of seconds or None, got {ttl!r}")
    if ttl is not None and ttl <= 0:
        raise InvalidArgument(f"ttl= takes a positive number of seconds or None, got {ttl!r}")
    for name, value in (("key", key), ("bypass", bypass), ("clock", clock)):
        if value is not None and not callable(value):
            raise InvalidArgument(f"{name}= takes a callable, got {value!r}")
    if not callable(cacheable):
        raise InvalidArgument(f"cacheable= takes a callable, got {cacheable!r}")
    if not isinstance(prefix, str):
        raise InvalidArgument(f"prefix= takes a str, got {prefix!r}")
    return ResponseCache(
        generate,
        store=store,
        ttl=None if ttl is None else float(ttl),
        key=key,
        bypass=bypass,
        cacheable=cacheable,
        prefix=prefix,
        clock=clock,
    )
