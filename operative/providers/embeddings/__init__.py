"""Embeddings: one :class:`Embedder` protocol (``await embedder.embed(texts)``) and
adapters for OpenAI, Gemini, Voyage AI and Ollama over ``httpx`` (no SDK).

Every adapter splits the texts into batches, sends them concurrently (bounded by
``max_concurrency``), retries a failed batch per ``retry=RetryOptions(...)`` and returns
the vectors in input order. Import this package explicitly; ``import operative`` does
not load it.
"""

from ._batching import HttpEmbedder as HttpEmbedder
from ._batching import embed_in_batches as embed_in_batches
from ._gemini import GeminiEmbedder as GeminiEmbedder
from ._gemini import gemini_embedder as gemini_embedder
from ._ollama import OllamaEmbedder as OllamaEmbedder
from ._ollama import ollama_embedder as ollama_embedder
from ._openai import OpenAIEmbedder as OpenAIEmbedder
from ._openai import openai_embedder as openai_embedder
from ._protocol import Embedder as Embedder
from ._voyage import VoyageEmbedder as VoyageEmbedder
from ._voyage import voyage_embedder as voyage_embedder

__all__ = [
    "Embedder",
    "GeminiEmbedder",
    "HttpEmbedder",
    "OllamaEmbedder",
    "OpenAIEmbedder",
    "VoyageEmbedder",
    "embed_in_batches",
    "gemini_embedder",
    "ollama_embedder",
    "openai_embedder",
    "voyage_embedder",
]
