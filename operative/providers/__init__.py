"""Ready-made ``GenerateFunction``s for model providers.

Each vendor lives in its own subpackage, which imports that vendor's SDK when it is
imported itself (never from ``import operative``)::

    from operative.providers.anthropic import anthropic_generate
    from operative.providers.openai import openai_generate

:func:`open_model` opens any of them from a model string (``"openai:gpt-4o-mini"``,
the strings ``operative --model`` takes).

This package holds what all of them share (the streamed :class:`Delta`, the provider
error tree, and :class:`ProviderUsageWarning`, warned when an adapter clamps usage a
server over-reports) and the combinators over any generate functions: :func:`fallover`
(try the next provider when one fails, optionally hedging a slow one), :func:`routing`
(pick a provider per request), and :func:`cached` (answer repeated requests from a
store).
Test doubles live in ``operative.providers.test``.
"""

from .._core._errors import ProviderAuthenticationError as ProviderAuthenticationError
from .._core._errors import ProviderConnectionError as ProviderConnectionError
from .._core._errors import ProviderError as ProviderError
from .._core._errors import ProviderRateLimitError as ProviderRateLimitError
from .._core._errors import ProviderRequestError as ProviderRequestError
from .._core._errors import ProviderTimeoutError as ProviderTimeoutError
from .._core._errors import ProviderUnavailableError as ProviderUnavailableError
from ._common import Delta as Delta
from ._common import DeltaCallback as DeltaCallback
from ._common import ProviderUsageWarning as ProviderUsageWarning
from ._errors import AllProvidersFailed as AllProvidersFailed
from ._errors import NoRouteError as NoRouteError
from ._fallover import Fallover as Fallover
from ._fallover import FalloverEntry as FalloverEntry
from ._fallover import fallover as fallover
from ._model_strings import open_model as open_model
from ._response_cache import ResponseCache as ResponseCache
from ._response_cache import cached as cached
from ._response_cache import response_cache_key as response_cache_key
from ._response_cache import response_key_material as response_key_material
from ._routing import Route as Route
from ._routing import Router as Router
from ._routing import by_model as by_model
from ._routing import estimate_tokens as estimate_tokens
from ._routing import fits_tokens as fits_tokens
from ._routing import needs_tools as needs_tools
from ._routing import per_token_cost as per_token_cost
from ._routing import routing as routing

__all__ = [
    "AllProvidersFailed",
    "Delta",
    "DeltaCallback",
    "Fallover",
    "FalloverEntry",
    "NoRouteError",
    "ProviderAuthenticationError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderRequestError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "ProviderUsageWarning",
    "ResponseCache",
    "Route",
    "Router",
    "by_model",
    "cached",
    "estimate_tokens",
    "fallover",
    "fits_tokens",
    "needs_tools",
    "open_model",
    "per_token_cost",
    "response_cache_key",
    "response_key_material",
    "routing",
]
