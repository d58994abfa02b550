"""Anthropic's Messages API through the official ``anthropic`` SDK.

Importing this module imports the SDK (``pip install 'operative[anthropic]'``);
``import operative`` never does.
"""

from ._generate import AnthropicGenerate as AnthropicGenerate
from ._generate import anthropic_generate as anthropic_generate

__all__ = ["AnthropicGenerate", "anthropic_generate"]
