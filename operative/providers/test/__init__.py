"""Test doubles for code built on operative's providers (no SDK, no network).

- :class:`MockProvider`: a generate function whose ``handler`` decides every answer, in
  the spirit of ``httpx.MockTransport``; it records the requests it saw.
- :func:`provider_error`: the typed ``ProviderError`` a real adapter raises for an HTTP
  status (``provider_error(529)`` is an overloaded, retryable failure).
- :class:`StreamRecorder` and :class:`StreamReplayer`: record a provider's streamed
  deltas (with the time between them) and replay them later, on trio's clock.
"""

from ._mock import MockHandler as MockHandler
from ._mock import MockProvider as MockProvider
from ._mock import provider_error as provider_error
from ._replay import StreamChunk as StreamChunk
from ._replay import StreamRecorder as StreamRecorder
from ._replay import StreamReplayer as StreamReplayer

__all__ = [
    "MockHandler",
    "MockProvider",
    "StreamChunk",
    "StreamRecorder",
    "StreamReplayer",
    "provider_error",
]
