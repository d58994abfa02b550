"""Ready-made ``GenerateFunction``s for model providers.

Each vendor lives in its own subpackage, which imports that vendor's SDK when it is
imported itself (never from ``import operative``)::

    from operative.providers.anthropic import anthropic_generate
    from operative.providers.openai import openai_generate

This package holds only what all of them share: the streamed :class:`Delta` and the
provider error tree.
"""

from .._errors import ProviderAuthenticationError as ProviderAuthenticationError
from .._errors import ProviderConnectionError as ProviderConnectionError
from .._errors import ProviderError as ProviderError
from .._errors import ProviderRateLimitError as ProviderRateLimitError
from .._errors import ProviderRequestError as ProviderRequestError
from .._errors import ProviderTimeoutError as ProviderTimeoutError
from .._errors import ProviderUnavailableError as ProviderUnavailableError
from ._common import Delta as Delta
from ._common import DeltaCallback as DeltaCallback

__all__ = [
    "Delta",
    "DeltaCallback",
    "ProviderAuthenticationError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderRequestError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
]
