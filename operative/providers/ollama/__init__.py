"""Ollama's ``/api/chat`` over ``httpx`` (no SDK; NDJSON streaming).

``httpx`` is a core dependency, so this subpackage needs no extra.
"""

from ._generate import OllamaGenerate as OllamaGenerate
from ._generate import ollama_generate as ollama_generate

__all__ = ["OllamaGenerate", "ollama_generate"]
