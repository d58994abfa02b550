"""The SQL core every SQL-backed piece of operative is built on.

::

    _sql/
    ├── _dialect.py           Dialect: what differs between the databases (placeholders,
    │                         schema words, locking clauses, upserts, errors, JSON access)
    ├── _sqlite_dialect.py    SQLITE
    ├── _postgres_dialect.py  POSTGRES
    ├── _database.py          Database: a bounded pool of connections lent to worker
    │                         threads, transactions, bounded closing; SqlBacked, the base
    │                         of the objects that own one
    ├── _sqlite.py            SqliteDatabase: stdlib sqlite3, WAL, busy waits, interrupt
    ├── _sqlite_file.py       refusing a file that is not an SQLite database, untouched
    ├── _postgres.py          PostgresDatabase: sync psycopg 3, bounded connects, cancel_safe
    │                         then a cut socket on cancel (OutcomeUnknownError)
    └── _migrate.py           Schema, Migration: versions recorded in the database,
                              migrations applied once, in a transaction, on open

Built on it, each written once for both databases: the key-value stores
(``operative.kvstore``), the durable engine and journal (``operative.durable``) and the
run store (``operative.runstore``). A backend class there only picks the database:
``SqliteEngine(path)`` is the engine over a :class:`SqliteDatabase`, ``PostgresEngine(dsn)``
the same engine over a :class:`PostgresDatabase`.

Nothing here imports psycopg until a :class:`PostgresDatabase` is created.
"""

from ._database import CLOSE_TIMEOUT, Database, SqlBacked, held
from ._dialect import Dialect, Field, Query
from ._migrate import VERSIONS_TABLE, Migration, Schema, ddl, migrate, read_versions
from ._postgres import CONNECT_TIMEOUT, OutcomeUnknownError, PostgresDatabase
from ._postgres_dialect import JSON_FUNCTION, POSTGRES, PostgresDialect
from ._sqlite import SqliteDatabase, check_busy_timeout, check_path
from ._sqlite_dialect import SQLITE, SqliteDialect

__all__ = [
    "CLOSE_TIMEOUT",
    "CONNECT_TIMEOUT",
    "JSON_FUNCTION",
    "POSTGRES",
    "SQLITE",
    "VERSIONS_TABLE",
    "Database",
    "Dialect",
    "Field",
    "Migration",
    "OutcomeUnknownError",
    "PostgresDatabase",
    "PostgresDialect",
    "Query",
    "Schema",
    "SqlBacked",
    "SqliteDatabase",
    "SqliteDialect",
    "check_busy_timeout",
    "check_path",
    "ddl",
    "held",
    "migrate",
    "read_versions",
]
