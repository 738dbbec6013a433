"""No quiet losses in the projects root: every catalog is in WAL mode whatever made it
(create, the backup copy a duplicate starts from, duplicate, import), and a damaged project is
listed with the reason -- by the facade, the CLI and the Projects page -- instead of vanishing."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from studio import api
from studio.core.errors import StudioError
from studio.projects.catalog import Catalog
from tests.conftest import assert_user_message, parse_model, save

TINY = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] x) => (float[N, 4] y) {
    y = Relu(x)
}
"""


def _mode(catalog: Path) -> str:
    """The journal mode as SQLite itself reads it from the file (independent of the studio's Catalog)."""
    with closing(sqlite3.connect(catalog)) as con:
        return con.execute("PRAGMA journal_mode").fetchone()[0].lower()


def _project_with_a_model(tmp_path: Path):
    p = api.create_project("modes")
    api.add_model(p, save(parse_model(TINY), tmp_path / "a.onnx"))
    return p


def test_every_catalog_is_in_wal_mode_whatever_made_it(tmp_path):
    p = _project_with_a_model(tmp_path)
    assert _mode(p.root / "catalog.sqlite") == "wal"                        # create

    backup = tmp_path / "backup.sqlite"
    p.catalog.backup_to(backup)
    assert _mode(backup) == "delete"              # a backup copy is a single self-contained file...
    Catalog(backup)
    assert _mode(backup) == "wal"                 # ...and a catalog once it is opened as one

    copy = api.duplicate_project(p)
    assert _mode(copy.root / "catalog.sqlite") == "wal"                     # duplicate

    archive = api.export_project(p, tmp_path / "p.zip")
    imported = api.import_project(archive)
    assert _mode(imported.root / "catalog.sqlite") == "wal"                 # import

    # A catalog someone switched to DELETE by hand (or copied from an old backup) is put back on open.
    with closing(sqlite3.connect(p.root / "catalog.sqlite")) as con:
        con.execute("PRAGMA journal_mode=DELETE")
    assert _mode(p.root / "catalog.sqlite") == "delete"
    assert [m.name for m in api.open_project(p.id).models()] == ["a"]
    assert _mode(p.root / "catalog.sqlite") == "wal"


def _damage(p, how: str) -> str:
    cat = p.root / "catalog.sqlite"
    if how == "garbage":
        cat.write_bytes(b"this is not an sqlite file at all" * 200)
        return "cannot be read"
    if how == "no-schema":
        with closing(sqlite3.connect(cat)) as con:
            con.execute("DELETE FROM meta")
            con.commit()
        return "no schema"
    if how == "missing":
        cat.unlink()
        for extra in p.root.glob("catalog.sqlite-*"):
            extra.unlink()
        return "missing"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["garbage", "no-schema", "missing"])
def test_a_damaged_project_is_listed_with_the_reason(tmp_path, how):
    good = api.create_project("good one")
    bad = _project_with_a_model(tmp_path)
    needle = _damage(bad, how)
    infos = {i.id: i for i in api.list_projects()}
    assert set(infos) == {good.id, bad.id}
    assert infos[good.id].damaged is None
    assert infos[bad.id].damaged is not None and needle in infos[bad.id].damaged
    assert_user_message(infos[bad.id].damaged, needle)
    # The CLI lists it too, says why, and can remove it by id.
    from studio.cli import main

    code = main(["projects", "list"])
    assert code == 0
    with pytest.raises(StudioError) as exc:         # opening it says so in one line
        api.open_project(bad.id)
    assert_user_message(str(exc.value))
    assert main(["projects", "rm", bad.id, "--yes"]) == 0
    assert [i.id for i in api.list_projects()] == [good.id]
    assert not bad.root.exists()


def test_cli_list_names_the_damaged_project(tmp_path, capsys):
    bad = _project_with_a_model(tmp_path)
    _damage(bad, "garbage")
    from studio.cli import main

    assert main(["projects", "list"]) == 0
    out = capsys.readouterr().out
    [line] = [ln for ln in out.splitlines() if bad.id in ln]
    assert "DAMAGED" in line and "cannot be read" in line and f"projects rm {bad.id} --yes" in line


def test_projects_page_shows_the_damaged_project(tmp_path, app):
    good = api.create_project("good one")
    bad = _project_with_a_model(tmp_path)
    _damage(bad, "garbage")
    at = app()
    at.switch_page("views/projects.py").run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any(bad.id in e and "cannot be read" in e for e in errors), errors
    assert not any("unexpected error" in e.lower() for e in errors), errors
    assert any(good.id in b.key for b in at.button if b.key)
    # Deleting it from the page (with the confirmation) removes the folder.
    at.button(key=f"proj_del_{bad.id}").click().run()
    at.button(key=f"proj_del_yes_{bad.id}").click().run()
    assert not bad.root.exists()
    assert [i.id for i in api.list_projects()] == [good.id]
