"""Google's Gemini API (``generateContent``) over ``httpx`` (no SDK).

google-genai's async client does not run under Trio, so this adapter speaks the REST
API itself; ``httpx`` is a core dependency, so it needs no extra.
"""

from ._generate import GeminiGenerate as GeminiGenerate
from ._generate import gemini_generate as gemini_generate
from ._schema import gemini_schema as gemini_schema

__all__ = ["GeminiGenerate", "gemini_generate", "gemini_schema"]
