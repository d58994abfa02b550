"""The packages' old names (``operative.storage``, ``operative.store``) still work for one
release: each name imported from them is the new package's object, with a
``DeprecationWarning`` naming the path to use, attributed to the importing line."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

RENAMED = [("operative.storage", "operative.kvstore"), ("operative.store", "operative.runstore")]


@pytest.mark.parametrize(("old", "new"), RENAMED)
def test_every_name_of_the_new_package_is_importable_from_the_old_path(old: str, new: str) -> None:
    renamed = importlib.import_module(new)
    with warnings.catch_warnings(record=True) as imported:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert imported == []  # importing alone does not warn: using a name does
    assert sorted(dir(module)) == sorted(renamed.__all__)
    for name in renamed.__all__:
        with pytest.warns(DeprecationWarning, match="is deprecated") as caught:
            value = getattr(module, name)
        assert value is getattr(renamed, name)
        [warning] = caught.list
        assert f"{old} is deprecated" in str(warning.message)
        assert f"import {name} from {new} instead" in str(warning.message)
        assert warning.filename == __file__  # the line that used the old path


@pytest.mark.parametrize(
    ("statement", "new"),
    [
        ("from operative.storage import SqliteStore, Put", "operative.kvstore"),
        ("from operative.store import SqliteRunStore", "operative.runstore"),
    ],
)
def test_a_from_import_of_the_old_path_warns_at_the_import(statement: str, new: str) -> None:
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match=f"from {new} instead") as caught:
        exec(compile(statement, "importer.py", "exec"), namespace)
    assert {warning.filename for warning in caught.list} == {"importer.py"}
    renamed = importlib.import_module(new)
    for name, value in namespace.items():
        if not name.startswith("__"):
            assert value is getattr(renamed, name)


@pytest.mark.parametrize(("old", "new"), RENAMED)
def test_unknown_and_private_names_are_not_forwarded(old: str, new: str) -> None:
    module = importlib.import_module(old)
    for name in ("NoSuchName", "_sql", "__all__"):
        with pytest.raises(AttributeError):
            getattr(module, name)


def test_the_new_paths_and_the_root_exports_do_not_warn() -> None:
    """``from operative import SqliteStore, PostgresStore, MemoryStore`` and the new
    packages import without any deprecation warning (warnings are errors here)."""
    source = (
        "from operative import MemoryStore, PostgresStore, SqliteStore\n"
        "import operative.kvstore as kv, operative.runstore as runs\n"
        "assert (MemoryStore, PostgresStore, SqliteStore) == "
        "(kv.MemoryStore, kv.PostgresStore, kv.SqliteStore)\n"
        "assert runs.SqliteRunStore.__module__ == 'operative.runstore._sqlite'\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", source],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
