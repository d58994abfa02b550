"""Fixtures shared with the storage tests (the throwaway PostgreSQL cluster)."""

from __future__ import annotations

from storage.conftest import postgres_dsn

__all__ = ["postgres_dsn"]
