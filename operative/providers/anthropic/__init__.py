"""Anthropic's Messages API through the official ``anthropic`` SDK.

Importing this module imports the SDK (``pip install 'operative[anthropic]'``);
``import operative`` never does.
"""

from ._cache import CACHE_CONTROL_KEY as CACHE_CONTROL_KEY
from ._cache import CacheSetting as CacheSetting
from ._cache import PromptCache as PromptCache
from ._generate import AnthropicGenerate as AnthropicGenerate
from ._generate import anthropic_generate as anthropic_generate

__all__ = [
    "CACHE_CONTROL_KEY",
    "AnthropicGenerate",
    "CacheSetting",
    "PromptCache",
    "anthropic_generate",
]
