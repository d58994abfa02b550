"""Context management: keep what is sent to the model within its context window.

:class:`ContextManagement` configures it (a budget, a warning threshold, a compaction
strategy and a token counter); a run makes one :class:`ContextManager` from it and
calls :meth:`ContextManager.prepare` before every generate call. ``prepare`` returns
the history to *send*: the run's own transcript is never changed, so nothing is lost,
and compaction only shapes each request.

See ``docs/context.md`` for the guide.
"""

from ._compaction import DEFAULT_SUMMARY_INSTRUCTIONS as DEFAULT_SUMMARY_INSTRUCTIONS
from ._compaction import SUMMARY_METADATA_KEY as SUMMARY_METADATA_KEY
from ._compaction import Compaction as Compaction
from ._compaction import CompactionStrategy as CompactionStrategy
from ._compaction import DropOldest as DropOldest
from ._compaction import KeepLast as KeepLast
from ._compaction import Summarize as Summarize
from ._compaction import drop_oldest as drop_oldest
from ._compaction import is_summary as is_summary
from ._compaction import keep_last as keep_last
from ._compaction import render as render
from ._compaction import summarize as summarize
from ._manager import ContextManagement as ContextManagement
from ._manager import ContextManager as ContextManager
from ._manager import ContextStatistics as ContextStatistics
from ._manager import Prepared as Prepared
from ._tokens import CONTEXT_WINDOWS as CONTEXT_WINDOWS
from ._tokens import ApproximateTokenCounter as ApproximateTokenCounter
from ._tokens import TokenCounter as TokenCounter
from ._tokens import TokenCounterLike as TokenCounterLike
from ._tokens import as_token_counter as as_token_counter
from ._tokens import context_window as context_window

__all__ = [
    "CONTEXT_WINDOWS",
    "DEFAULT_SUMMARY_INSTRUCTIONS",
    "SUMMARY_METADATA_KEY",
    "ApproximateTokenCounter",
    "Compaction",
    "CompactionStrategy",
    "ContextManagement",
    "ContextManager",
    "ContextStatistics",
    "DropOldest",
    "KeepLast",
    "Prepared",
    "Summarize",
    "TokenCounter",
    "TokenCounterLike",
    "as_token_counter",
    "context_window",
    "drop_oldest",
    "is_summary",
    "keep_last",
    "render",
    "summarize",
]
