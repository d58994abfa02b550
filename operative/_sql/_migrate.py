"""Schema versions recorded in the database, and migrations that run once.

Each SQL-backed piece declares a :class:`Schema`: a name and an ordered tuple of
:class:`Migration` objects, migration *n* taking the schema from version *n - 1* to *n*.
The version each schema is at is recorded in the database itself, in one table::

    operative_schema (name PRIMARY KEY, version)   -- e.g. ('durable', 2)

A table rather than SQLite's ``PRAGMA user_version``, on both databases: one file or
database holds several schemas (the command keeps sessions, durable runs and the run
store's indexes in one SQLite file, and each key-value table is a schema of its own, named
after the table), and a file that another application also uses may keep its own number
in ``user_version``. The PostgreSQL table lives in the first schema of the
``search_path``, beside the tables it describes.

:func:`migrate` runs when a connection is opened. It reads the versions without taking
any lock; when every schema is current (the usual case) that is all. Otherwise it opens
one write transaction that serialises it against every other process (SQLite's ``BEGIN
IMMEDIATE``; on PostgreSQL an advisory lock taken first), reads the versions again,
applies the missing migrations in order, records the new versions and commits: all or
nothing, and once, however many processes open the database together.

A version above what this code knows means a newer operative upgraded the database:
:class:`~operative.errors.SchemaVersionError`, and nothing is written.

Databases written before versions were recorded hold no version (0), yet already hold
the tables of the first migrations. Those migrations, the baseline, are therefore written
so that running them over such a database changes nothing it has (``IF NOT EXISTS``, a
column added only when missing). Migrations added after them run only on databases that
recorded the version before theirs, and are plain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from .._core._errors import SchemaVersionError
from ._dialect import Dialect

__all__ = ["VERSIONS_TABLE", "Migration", "Schema", "ddl", "migrate", "read_versions"]

_T = TypeVar("_T")

VERSIONS_TABLE = "operative_schema"
_CREATE_VERSIONS = (
    f"CREATE TABLE IF NOT EXISTS {VERSIONS_TABLE} "
    "(name {key} PRIMARY KEY NOT NULL, version {int} NOT NULL){without_rowid}"
)


@attrs.frozen
class Migration:
    """One step of a schema: ``apply(connection, dialect)``, inside the migration's
    transaction. ``summary`` says what it changes."""

    summary: str
    apply: Callable[[Any, Dialect], None]


def ddl(*templates: str) -> Callable[[Any, Dialect], None]:
    """A migration step running ``templates`` (:meth:`Dialect.format` fills them in)."""

    def apply(conn: Any, dialect: Dialect) -> None:
        for template in templates:
            conn.execute(dialect.format(template))

    return apply


@attrs.frozen
class Schema:
    """A named schema and its migrations, in order; ``requires`` are brought up to date
    before it (the run store's indexes need the durable tables)."""

    name: str
    migrations: tuple[Migration, ...]
    requires: tuple[Schema, ...] = ()

    @property
    def version(self) -> int:
        """The version this code brings the schema to."""
        return len(self.migrations)


def _in_order(schemas: Sequence[Schema]) -> list[Schema]:
    """``schemas`` and what they require, each once, requirements first."""
    ordered: list[Schema] = []

    def visit(schema: Schema) -> None:
        for required in schema.requires:
            visit(required)
        if all(known.name != schema.name for known in ordered):
            ordered.append(schema)

    for schema in schemas:
        visit(schema)
    return ordered


def read_versions(conn: Any, dialect: Dialect, names: Sequence[str]) -> dict[str, int]:
    """The recorded versions of ``names`` (a schema never migrated is absent)."""
    if not names or not dialect.table_exists(conn, VERSIONS_TABLE):
        return {}
    clause, params = dialect.any_of("name", names)
    rows = conn.execute(
        f"SELECT name, version FROM {VERSIONS_TABLE} WHERE {clause}", params
    ).fetchall()
    found: dict[str, int] = {}
    for name, version in rows:
        found[name.decode() if isinstance(name, bytes) else str(name)] = int(version)
    return found


def _check_known(schemas: Sequence[Schema], found: dict[str, int], where: str) -> None:
    for schema in schemas:
        version = found.get(schema.name, 0)
        if version > schema.version:
            raise SchemaVersionError(
                f"{where} holds the {schema.name!r} schema at version {version}, but this "
                f"operative knows versions up to {schema.version} only: a newer operative "
                "upgraded it. Upgrade operative to use this database (pip install -U "
                "operative), or point this program at another one",
                what=f"the {schema.name!r} schema of {where}",
                detail=f"version {version} > {schema.version}",
                found=version,
                supported=schema.version,
            )


def migrate(
    conn: Any,
    dialect: Dialect,
    schemas: Sequence[Schema],
    *,
    where: str,
    transaction: Callable[[Any, Callable[[Any], None]], None],
) -> None:
    """Bring ``schemas`` (and what they require) to this code's versions on ``conn``.

    ``transaction(conn, work)`` runs ``work`` in one write transaction. See the module
    docstring for the locking and the errors.
    """
    wanted = _in_order(schemas)
    names = [schema.name for schema in wanted]
    found = read_versions(conn, dialect, names)
    _check_known(wanted, found, where)
    if all(found.get(schema.name, 0) == schema.version for schema in wanted):
        return

    def upgrade(conn: Any) -> None:
        if dialect.schema_lock is not None:
            conn.execute(dialect.schema_lock)
        conn.execute(dialect.format(_CREATE_VERSIONS))
        current = read_versions(conn, dialect, names)  # another process may have been first
        _check_known(wanted, current, where)
        record = dialect.upsert(VERSIONS_TABLE, ("name",), ("version",))
        for schema in wanted:
            at = current.get(schema.name, 0)
            if at == schema.version:
                continue
            for migration in schema.migrations[at:]:
                migration.apply(conn, dialect)
            conn.execute(record, (schema.name, schema.version))

    transaction(conn, upgrade)
