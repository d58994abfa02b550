"""Conformance kits: the checks operative's own stores and engines pass, for yours.

Subclass a kit as a pytest test class and give it a factory; pytest runs every check::

    from operative.kvstore import SqliteStore
    from operative.testing.conformance import StoreConformance

    class TestMyStore(StoreConformance):
        async def make_store(self):
            return SqliteStore(self.tmp_path / "kv.db")

Async checks carry ``pytest.mark.trio`` (pytest-trio runs them); the hypothesis check
runs its own ``trio.run`` per example. A failure is an ``AssertionError`` that says what
the store or engine did wrong.
"""

from ._conformance_engine import EngineConformance as EngineConformance
from ._conformance_store import StoreConformance as StoreConformance

__all__ = ["EngineConformance", "StoreConformance"]
