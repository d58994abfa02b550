"""What differs between SQLite and PostgreSQL, in one place: the :class:`Dialect`.

Every SQL-backed piece of operative (the key-value stores, the durable engine and its
journal, the run store) writes its statements once and asks the dialect for the parts
that differ:

- **placeholders and lists**: :attr:`~Dialect.mark` (``?`` or ``%s``),
  :meth:`~Dialect.any_of` (``IN (?, ...)`` or ``= ANY(%s)``), :meth:`~Dialect.insert_rows`
  (``executemany`` or one ``unnest`` statement);
- **schema words** for ``CREATE`` statements: column types, ``WITHOUT ROWID``, the
  ``"C"`` collation that makes PostgreSQL order keys by code point as SQLite does
  (:meth:`~Dialect.format` fills them into a statement template);
- **locking clauses**: ``FOR UPDATE`` and ``FOR UPDATE SKIP LOCKED`` on PostgreSQL,
  nothing on SQLite, where a write transaction (``BEGIN IMMEDIATE``) holds the whole file;
- **upserts** (:meth:`~Dialect.upsert`) and the catalog (does a table or column exist);
- **error classification**: which driver exceptions mean a unique key was taken, and
  which mean "run the transaction again" (a deadlock);
- **JSON access** over ``TEXT`` columns, for the run store's queries.

Templates given to :meth:`~Dialect.format` name these words in braces: ``{m}`` (the
placeholder), ``{key}`` (text that is a key: compared and ordered by code point),
``{int}``, ``{real}``, ``{without_rowid}``, ``{lock}``, ``{skip_locked}``, ``{distinct}``
(``IS DISTINCT FROM``). A template holds no other brace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["Dialect", "Field", "Query"]

Query = tuple[str, list[Any]]
"""A statement and its parameters."""


@attrs.frozen
class Field:
    """A value a readable JSON record holds at ``path``: an integer, a string (or null),
    or an object; when not ``required``, it may be missing (the record's default applies)."""

    path: tuple[str, ...]
    kind: str
    required: bool = False


class Dialect:
    """How one database spells what the SQL-backed pieces need (see the module docstring)."""

    name: str = ""
    """``"sqlite"`` or ``"postgres"``."""
    mark: str = "?"
    """The parameter placeholder."""
    chunk: int = 500
    """Values per :meth:`any_of` list a statement may hold (SQLite's parameter limit)."""
    holds_nul: bool = True
    """Whether a text column can hold a NUL character (PostgreSQL's cannot)."""
    schema_lock: str | None = None
    """A statement that serialises schema changes between connections of any process,
    run first in a migration's transaction (``None``: the transaction itself does)."""
    words: Mapping[str, str]
    """The schema words and clauses :meth:`format` fills in."""

    def format(self, template: str) -> str:
        """``template`` with this dialect's words filled in (see the module docstring)."""
        return template.format(m=self.mark, **self.words)

    def fold(self, name: str) -> str:
        """A plain identifier as the database compares it (SQLite ignores ASCII case)."""
        return name

    def any_of(self, column: str, values: Sequence[Any]) -> Query:
        """``column`` is one of ``values`` (at most :attr:`chunk` of them)."""
        raise NotImplementedError

    def upsert(self, table: str, keys: Sequence[str], values: Sequence[str]) -> str:
        """Insert a row, or update ``values`` of the row with the same ``keys``."""
        columns = [*keys, *values]
        marks = ", ".join(self.mark for _ in columns)
        updates = ", ".join(f"{column} = excluded.{column}" for column in values)
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) "
            f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"
        )

    def insert_rows(
        self, conn: Any, table: str, columns: Sequence[tuple[str, str]], rows: Sequence[Any]
    ) -> None:
        """Insert ``rows`` (tuples in ``columns`` order) into ``table``; ``columns`` are
        ``(name, kind)`` pairs, the kind ``"text"``, ``"int"`` or ``"real"``.

        One row (the usual journal append) is one plain ``INSERT ... VALUES``, the
        cheapest statement on both databases; several go in one round trip.
        """
        if not rows:
            return
        names = ", ".join(name for name, _ in columns)
        if len(rows) == 1:
            marks = ", ".join(self.mark for _ in columns)
            conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows[0])
        else:
            self._insert_many(conn, table, names, columns, rows)

    def _insert_many(
        self,
        conn: Any,
        table: str,
        names: str,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[Any],
    ) -> None:
        raise NotImplementedError

    # -- errors --------------------------------------------------------------------

    @property
    def unique_violation(self) -> tuple[type[BaseException], ...]:
        """The driver's exceptions for a row whose unique key is taken."""
        raise NotImplementedError

    @property
    def transient(self) -> tuple[type[BaseException], ...]:
        """The driver's exceptions after which the whole transaction may simply run again
        (a deadlock, a serialisation failure)."""
        raise NotImplementedError

    # -- the catalog ---------------------------------------------------------------

    def table_exists(self, conn: Any, table: str) -> bool:
        """Whether the database (PostgreSQL: the ``search_path``) holds ``table``."""
        raise NotImplementedError

    def column_exists(self, conn: Any, table: str, column: str) -> bool:
        """Whether ``table`` has ``column``."""
        raise NotImplementedError

    def add_column(self, conn: Any, table: str, column: str, kind: str) -> None:
        """Add ``column`` to ``table`` unless it is there already."""
        if not self.column_exists(conn, table, column):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    # -- JSON in TEXT columns ------------------------------------------------------

    def json_setup(self) -> tuple[str, ...]:
        """Statements creating what the JSON functions below need in the database."""
        return ()

    def text(self, doc: str, *path: str) -> str:
        """The string at ``path`` of the JSON in ``doc``; NULL if unreadable or not a string."""
        raise NotImplementedError

    def integer(self, doc: str, *path: str) -> str:
        """The integer at ``path``; NULL if unreadable or not an integer."""
        raise NotImplementedError

    def readable(self, doc: str, fields: Sequence[Field]) -> str:
        """True when ``doc`` is a JSON object whose ``fields`` have their kinds."""
        raise NotImplementedError

    def element(self, doc: str, path: tuple[str, ...], key: str, value: str, wanted: str) -> str:
        """A scalar subquery over the array at ``path``: of its first object whose string
        ``key`` equals ``wanted``, the JSON text (``value`` empty) or the string ``value``."""
        raise NotImplementedError
