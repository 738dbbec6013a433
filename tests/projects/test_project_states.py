"""Issue 31 item 2 (R66): projects never lie about their state.

* A projects root this process cannot write opens its projects read-only: ``projects list/show``,
  ``data list`` and ``projects export`` work, every write is refused in one line, and nothing is called
  "DAMAGED" with advice to ``rm --yes``. Two real mechanisms: a read-only bind mount (EROFS, as root)
  and an unprivileged user (``setpriv`` to nobody: EACCES on a 0755 root-owned folder).
* "DAMAGED" stays for a catalog SQLite itself calls corrupt.
* Names are unique under concurrency: real processes released together by a barrier file.
* A write lock held by another process past the wait is one line naming that process, not
  ``sqlite3.OperationalError: database is locked``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from studio import api
from studio.projects.catalog import error_kind
from tests.conftest import ROOT, SAMPLES, assert_user_message, sha256_file
from tests.forked_cli import run_forked
from tests.servers import wait_until

HANG_GUARD_S = 300
PHOTOS = SAMPLES / "photos"


def _env(root: Path, home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONNX_STUDIO_")}
    return {**env, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(home),
            "XDG_CACHE_HOME": str(home / "cache"), "XDG_DATA_HOME": str(home / "data"),
            "ONNX_STUDIO_WORKSPACE": str(home / "ws"), "ONNX_STUDIO_PROJECTS_ROOT": str(root), **extra}


def _studio(argv: list[str], env: dict, cwd: Path, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """A process of its own; as another user (``prefix``: setpriv) a cold interpreter, else forked from a
    preloaded server (tests/forked_cli.py)."""
    if not prefix:
        return run_forked(argv, cwd=cwd, env=env, timeout=HANG_GUARD_S)
    return subprocess.run([*prefix, sys.executable, "-m", "studio", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)


def _filled_root(root: Path) -> tuple[str, str]:
    """A projects root with project 'shared' holding a model version and a dataset; (id, model sha256)."""
    os.environ["ONNX_STUDIO_PROJECTS_ROOT"] = str(root)      # the autouse fixture restores it
    p = api.create_project("shared")
    _, v = api.add_model(p, SAMPLES / "cnn_unfused.onnx")
    api.add_dataset(p, PHOTOS, name="pics")
    return p.id, v.sha256


def _catalog_files(root: Path) -> dict[str, str]:
    return {str(f.relative_to(root)): sha256_file(f) for f in sorted(root.rglob("*")) if f.is_file()}


def _read_only_checks(root: Path, pid: str, env: dict, work: Path, prefix: tuple[str, ...] = ()) -> None:
    """What every read-only root must give: reads work, writes refuse in one line, nothing DAMAGED."""
    listed = _studio(["projects", "list"], env, work, prefix)
    assert listed.returncode == 0, listed.stderr[-800:]
    assert "DAMAGED" not in listed.stdout and "rm " not in listed.stdout, listed.stdout
    [line] = [ln for ln in listed.stdout.splitlines() if pid in ln]
    assert "shared" in line and "1 models, 1 versions" in line and "(read-only)" in line, line
    show = _studio(["projects", "show", "shared", "--json"], env, work, prefix)
    assert show.returncode == 0, show.stderr[-800:]
    shown = json.loads(show.stdout)
    assert shown["id"] == pid and [m["name"] for m in shown["models"]] == ["cnn_unfused"]
    data = _studio(["data", "list", "--project", "shared"], env, work, prefix)
    assert data.returncode == 0 and "pics" in data.stdout, data.stderr[-800:]
    exported = _studio(["projects", "export", "shared", "-o", str(work / "shared.zip")], env, work, prefix)
    assert exported.returncode == 0, exported.stderr[-800:]
    with zipfile.ZipFile(work / "shared.zip") as zf:
        names = zf.namelist()
        assert "catalog.sqlite" in names and any(n.endswith("cnn_unfused.onnx") for n in names)
    for argv, needle in ((["projects", "rename", "shared", "other"], "read-only"),
                         (["projects", "rm", "shared", "--yes"], "nothing was deleted"),
                         (["projects", "create", "new"], "cannot be written"),
                         (["data", "add", str(PHOTOS), "--project", "shared", "--name", "more"], "read-only"),
                         (["check", str(SAMPLES / "if_loop.onnx"), "--engines", "onnxruntime", "--project", "shared"],
                          "read-only")):
        proc = _studio(argv, env, work, prefix)
        assert proc.returncode != 0, (argv, proc.stdout[-500:])
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        err = proc.stderr.strip().splitlines()
        assert len(err) == 1, (argv, proc.stderr)
        assert err[0].startswith("error: ") and needle in err[0], (argv, err[0])
        assert "DAMAGED" not in err[0] and "--yes to delete" not in err[0], err[0]


def test_a_read_only_mount_opens_projects_read_only(tmp_path):
    src, ro = tmp_path / "root", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    pid, _sha = _filled_root(src)
    bound = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True, text=True)
    if bound.returncode != 0:
        pytest.skip(f"a bind mount is not permitted here: {bound.stderr.strip()[:200]}")
    try:
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"remounting read-only is not permitted here: {remount.stderr.strip()[:200]}")
        before = _catalog_files(src)
        home = tmp_path / "home"
        home.mkdir()
        _read_only_checks(ro, pid, _env(ro, home), tmp_path)
        assert _catalog_files(src) == before                    # nothing was written, nothing removed
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)


AS_NOBODY = ("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups")


def test_another_users_root_opens_read_only_for_an_unprivileged_user():
    """EACCES, not EROFS: the root belongs to root (0755); the commands run as nobody."""
    base = Path(tempfile.mkdtemp(prefix="onnx-studio-perm-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        root = base / "root"
        root.mkdir()
        pid, _sha = _filled_root(root)
        for d, _dirs, files in os.walk(root):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(Path(d) / f, 0o644)
        work = base / "work"
        work.mkdir()
        os.chown(work, 65534, 65534)
        home = work / "home"
        try:
            probe = subprocess.run([*AS_NOBODY, sys.executable, "-c", "import os; print(os.getuid())"],
                                   capture_output=True, text=True)
        except FileNotFoundError:
            pytest.skip("setpriv is not installed")
        if probe.returncode != 0 or probe.stdout.strip() != "65534":
            pytest.skip(f"cannot run a process as nobody here: {probe.stderr.strip()[-200:]}")
        before = _catalog_files(root)
        _read_only_checks(root, pid, _env(root, home), work, AS_NOBODY)
        assert _catalog_files(root) == before
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_damaged_is_said_only_of_a_corrupt_catalog(tmp_path, capsys):
    from studio.cli import main

    good = api.create_project("good")
    bad = api.create_project("bad")
    (bad.root / "catalog.sqlite").write_bytes(b"this is not an sqlite file at all" * 200)
    for f in bad.root.glob("catalog.sqlite-*"):
        f.unlink()
    assert main(["projects", "list"]) == 0
    out = capsys.readouterr().out
    [line] = [ln for ln in out.splitlines() if bad.id in ln]
    assert "DAMAGED" in line and f"projects rm {bad.id} --yes" in line
    assert "(read-only)" not in next(ln for ln in out.splitlines() if good.id in ln)
    # SQLite's own words decide: a corrupt file is 'corrupt', a file it cannot open is 'unreadable'.
    with pytest.raises(sqlite3.DatabaseError) as corrupt:
        sqlite3.connect(bad.root / "catalog.sqlite").execute("SELECT * FROM meta")
    assert error_kind(corrupt.value) == "corrupt"
    with pytest.raises(sqlite3.OperationalError) as cannot:
        sqlite3.connect(f"file:{tmp_path}/none/x.sqlite?mode=ro", uri=True).execute("SELECT 1")
    assert error_kind(cannot.value) == "unreadable"


_RACE = """
import os, sys, time, json
from pathlib import Path
from studio import api
go = Path(sys.argv[1])
Path(f"{go}.ready-{os.getpid()}").touch()
while not go.exists():
    time.sleep(0.001)
what = sys.argv[2]
if what == "project":
    p = api.open_project("shared", create=True)
    print(json.dumps({"id": p.id}))
else:
    p = api.open_project("shared")
    try:
        ds = api.add_dataset(p, sys.argv[3], name="dup")
        print(json.dumps({"dataset": ds.id}))
    except Exception as exc:
        print(json.dumps({"error": str(exc), "code": getattr(exc, "code", "")}))
"""


def _race(tmp_path: Path, n: int, *args: str) -> list[dict]:
    go = tmp_path / f"go-{args[0]}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", _RACE, str(go), *args], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    # every child has imported studio.api and waits on the barrier (was a fixed 8 s sleep, and the children
    # imported the studio only after it: seconds apart); a child that died is reported below
    assert wait_until(lambda: len(list(tmp_path.glob(f"{go.name}.ready-*"))) == n
                      or any(p.poll() is not None for p in procs), HANG_GUARD_S)
    go.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=HANG_GUARD_S)
        assert p.returncode == 0 and "Traceback" not in err, err[-1500:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def test_concurrent_first_uses_of_a_project_name_make_one_project(tmp_path):
    outs = _race(tmp_path, 4, "project")
    assert len({o["id"] for o in outs}) == 1, outs
    assert [i.name for i in api.list_projects()] == ["shared"]


def test_concurrent_data_add_of_one_name_makes_one_dataset(tmp_path):
    p = api.create_project("shared")
    outs = _race(tmp_path, 3, "dataset", str(PHOTOS))
    won = [o for o in outs if "dataset" in o]
    lost = [o for o in outs if "error" in o]
    assert len(won) == 1 and len(lost) == 2, outs
    assert all(o["code"] == "EXISTS" and "already has a dataset named 'dup'" in o["error"] for o in lost), lost
    assert [d.name for d in api.project_datasets(p)] == ["dup"]
    assert sorted(d.name for d in (p.root / "data").iterdir() if not d.name.startswith(".")) == [won[0]["dataset"]]


_HOLD = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN IMMEDIATE")
print("holding", flush=True)
time.sleep(600)
"""


def test_a_busy_write_lock_is_one_line_naming_the_holder(tmp_path):
    p = api.create_project("busy")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(p.root / "catalog.sqlite")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        home = tmp_path / "home"
        home.mkdir()
        env = _env(Path(os.environ["ONNX_STUDIO_PROJECTS_ROOT"]), home, ONNX_STUDIO_CATALOG_BUSY_S="2")
        proc = _studio(["projects", "rename", "busy", "calm"], env, tmp_path)
        listed = _studio(["projects", "list"], env, tmp_path)          # readers are never blocked (WAL)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert_user_message(line, "busy", "another process", f"pid {holder.pid}", "nothing was changed")
    assert "database is locked" not in line
    assert listed.returncode == 0 and "busy" in listed.stdout and "DAMAGED" not in listed.stdout
    assert api.open_project(p.id).name == "busy"
