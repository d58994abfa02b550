"""OpenAI's Chat Completions and Responses APIs (and compatible servers) through the
``openai`` SDK.

Importing this module imports the SDK (``pip install 'operative[openai]'``);
``import operative`` never does.
"""

from ._generate import OpenAIGenerate as OpenAIGenerate
from ._generate import openai_generate as openai_generate

__all__ = ["OpenAIGenerate", "openai_generate"]
