"""Fixtures: the durable databases of the durable-run tests, one per backend.

Imported under the name pytest gives that conftest (``durable.conftest``), so both
directories share one module and its schema counter.
"""

from __future__ import annotations

from durable.conftest import DurableDb, durable_db

__all__ = ["DurableDb", "durable_db"]
