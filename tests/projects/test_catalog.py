"""The project catalog and store: versions per model, settings, jobs, and what a
crash leaves behind (two writer processes; kill -9 of a writer mid-job and mid-store)."""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from studio import api
from studio.core.errors import StudioError
from studio.projects import Project
from tests.conftest import ROOT, SAMPLES, assert_user_message, parse_model, save, sha256_file

TINY = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] x) => (float[N, 4] y) {
    y = Relu(x)
}
"""


def _tiny(path: Path, op: str = "Relu") -> Path:
    return save(parse_model(TINY.replace("Relu", op)), path)


def test_models_have_their_own_version_trees(tmp_path):
    p = api.create_project("demo")
    assert len(p.id) >= 20 and p.name == "demo"
    a, va = api.add_model(p, _tiny(tmp_path / "a.onnx"))
    b, vb = api.add_model(p, SAMPLES / "external_data.onnx")
    before = sha256_file(SAMPLES / "external_data.onnx")
    child = api.add_version(a, _tiny(tmp_path / "a2.onnx", "Sigmoid"), label="sig", parent=va.id,
                            provenance={"pipeline": [{"pass": "x"}]})
    assert [v.id for v in a.versions] == ["v0", "v1"] and [v.id for v in b.versions] == ["v0"]
    assert child.parent == "v0" and a.version("v1").provenance == {"pipeline": [{"pass": "x"}]}
    # Content-addressed, written once, under the project; external data travels with the model.
    stored = p.root / b.version("v0").path
    assert stored == p.root / "models" / vb.sha256 / "external_data.onnx"
    assert (stored.parent / "external_data.onnx.data").is_file()
    assert b.handle("v0").sha256 == vb.sha256 and b.handle("v0").name == "external_data"
    assert sha256_file(SAMPLES / "external_data.onnx") == before
    # The same content twice is stored once.
    api.add_version(a, _tiny(tmp_path / "again.onnx"), label="same", parent="v0")
    assert len([d for d in (p.root / "models").iterdir()]) == 3
    # A fresh Project object (another process, a reload) sees the same state.
    again = api.open_project(p.id)
    assert [m.name for m in again.models()] == ["a", "external_data"]
    assert [v.label for v in again.model(a.id).versions] == ["original", "sig", "same"]


def test_ids_are_unguessable_and_names_separate():
    ids = {api.create_project("same name").id for _ in range(5)}
    assert len(ids) == 5 and all(len(i) >= 20 for i in ids)
    time.sleep(0.01)
    newest = api.rename_project(sorted(ids)[2], "same name").id    # changed last
    assert api.open_project("same name").id == newest           # a name is a label: the newest opens
    with pytest.raises(StudioError) as exc:                       # where it must be one: refused, naming ids
        api.open_project("same name", unique=True)
    assert_user_message(str(exc.value), "5 projects")
    with pytest.raises(StudioError):
        api.open_project("same name", by_name=False)


def test_settings_per_project_and_model(tmp_path):
    p = api.create_project("s")
    m, _ = api.add_model(p, _tiny(tmp_path / "a.onnx"))
    api.set_setting(p, "engines", ["ort", "ov"])
    api.set_setting(p, "dims", {"N": 2}, model_id=m.id)
    api.set_setting(p, "page.graph", {"level": 2}, model_id=m.id)
    assert api.get_settings(p.id) == {"engines": ["ort", "ov"]}
    assert api.get_settings(p.id, m.id) == {"dims": {"N": 2}, "page.graph": {"level": 2}}
    api.set_setting(p, "dims", None, model_id=m.id)
    assert api.get_settings(p, m.id) == {"page.graph": {"level": 2}}


def test_job_rows_open_before_and_close_after(tmp_path):
    p = api.create_project("jobs")
    with api.job(p, "optimize", {"preset": "safe"}) as j:
        assert [x.state for x in api.project_jobs(p)] == ["running"]
        (j.dir / "report.json").write_text("{}")
        art = j.record_artifact(j.dir / "report.json", "report")
    with pytest.raises(ValueError), api.job(p, "export") as j2:
        raise ValueError("boom")
    jobs = {x.id: x for x in api.project_jobs(p)}
    assert jobs[j.id].state == "done" and jobs[j.id].ended is not None and jobs[j.id].args == {"preset": "safe"}
    assert jobs[j2.id].state == "failed" and jobs[j2.id].message == "boom"
    assert art.path == f"artifacts/{j.id}/report.json"
    assert [a.kind for a in api.project_artifacts(p)] == ["report"]
    with pytest.raises(StudioError):
        api.record_artifact(p, tmp_path / "outside.txt", "report")


WRITER = """
import sys, pathlib, onnx
from studio import api
p = api.open_project(sys.argv[1], by_name=False)
tag, model = sys.argv[2], onnx.load(sys.argv[4])
work = pathlib.Path(sys.argv[5])
for i in range(int(sys.argv[3])):
    api.set_setting(p, f"{tag}-{i}", i)
    with api.job(p, "w", {"i": i}):
        if i % 8 == 0:
            model.doc_string = f"{tag}{i}"
            onnx.save(model, work / f"{tag}.onnx")
            api.add_version(p.model("m1"), work / f"{tag}.onnx", label=f"{tag}{i}", parent="v0")
"""


def test_two_processes_write_the_same_catalog(tmp_path):
    p = api.create_project("conc")
    # the writers save a.onnx and b.onnx in tmp_path: the base model must not be one of them, or writer b may read
    # it while writer a rewrites it (a full run saw b load a truncated a.onnx and add a model with no graph)
    base = _tiny(tmp_path / "base.onnx")
    api.add_model(p, base)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, p.id, tag, "40", str(base), str(tmp_path)], cwd=ROOT)
             for tag in ("a", "b")]
    assert [pr.wait(240) for pr in procs] == [0, 0]
    settings = api.get_settings(p)
    assert len(settings) == 80 and settings["a-39"] == 39 and settings["b-0"] == 0
    jobs = api.project_jobs(p)
    assert len(jobs) == 80 and {j.state for j in jobs} == {"done"}
    versions = p.model("m1").versions                  # one writer at a time: no id given twice
    assert [v.id for v in versions] == [f"v{i}" for i in range(11)]
    assert sorted(v.label for v in versions[1:]) == sorted(f"{t}{i}" for t in "ab" for i in range(0, 40, 8))


HOLDER = """
import sys, time, pathlib
from studio import api
p = api.open_project(sys.argv[1], by_name=False)
m = p.model("m1")
with api.job(p, "optimize", model_id="m1") as j:
    (j.dir / "partial.onnx").write_bytes(b"half")
    pathlib.Path(sys.argv[2]).write_text(j.id)
    time.sleep(600)
"""


def _wait_file(path: Path, proc: subprocess.Popen) -> None:
    while not path.exists():
        assert proc.poll() is None, "the writer exited early"
        time.sleep(0.05)


def test_kill_9_mid_job_leaves_an_interrupted_job(tmp_path):
    p = api.create_project("crash")
    api.add_model(p, _tiny(tmp_path / "a.onnx"))
    marker = tmp_path / "started"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, p.id, str(marker)], cwd=ROOT)
    _wait_file(marker, proc)
    # While its process lives, another process sees the job as running, not interrupted.
    assert [j.state for j in api.project_jobs(p.id)] == ["running"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    reopened = api.open_project(p.id)
    jobs = api.project_jobs(reopened)
    assert [(j.id, j.state) for j in jobs] == [(marker.read_text(), "interrupted")]
    assert "ended before it finished" in jobs[0].message
    with sqlite3.connect(reopened.root / "catalog.sqlite") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [v.id for v in reopened.model("m1").versions] == ["v0"]


STORER = """
import sys, pathlib, onnx
from onnx import helper
from studio import api
p = api.open_project(sys.argv[1], by_name=False)
m = p.model("m1")
src = pathlib.Path(sys.argv[2])
base = onnx.load(sys.argv[3])
for i in range(10_000):
    base.doc_string = "x" * 200_000 + str(i)           # a new content each time, ~200 kB
    onnx.save(base, src / "m.onnx")
    m.add_file(src / "m.onnx", label=f"l{i}", parent="v0")
    if i == 2:
        pathlib.Path(sys.argv[4]).write_text("go")
"""


def test_kill_9_mid_store_leaves_only_complete_versions(tmp_path):
    p = api.create_project("crash-store")
    base = _tiny(tmp_path / "a.onnx")
    api.add_model(p, base)
    work = tmp_path / "src"
    work.mkdir()
    marker = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-c", STORER, p.id, str(work), str(base), str(marker)], cwd=ROOT)
    _wait_file(marker, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    reopened = api.open_project(p.id)
    m = reopened.model("m1")
    versions = m.versions
    assert len(versions) >= 4
    for v in versions:                      # every row names a complete, matching file
        assert m.handle(v.id).sha256 == v.sha256
    for d in (reopened.root / "models").iterdir():
        # No half-written model under models/: each folder is complete and named by its content (a
        # folder stored just before the kill, not yet in the catalog, is complete too).
        [model_file] = d.glob("*.onnx")
        assert api.load(model_file).sha256 == d.name


def test_rename_duplicate_delete(tmp_path):
    p = api.create_project("orig")
    m, _ = api.add_model(p, _tiny(tmp_path / "a.onnx"))
    api.set_setting(p, "dims", {"N": 3}, model_id=m.id)
    api.rename_project(p, "  renamed   twice ")
    assert p.name == "renamed twice"
    copy = api.duplicate_project(p)
    assert copy.id != p.id and copy.name == "renamed twice (copy)"
    assert api.get_settings(copy, "m1") == {"dims": {"N": 3}}
    assert copy.model("m1").handle("v0").sha256 == m.handle("v0").sha256
    api.delete_project(p)
    assert [i.id for i in api.list_projects()] == [copy.id]
    assert not p.root.exists()


def test_export_import_round_trip(tmp_path):
    p = api.create_project("zip me")
    m, v0 = api.add_model(p, SAMPLES / "external_data.onnx")
    with api.job(p, "export") as j:
        (j.dir / "bundle.txt").write_text("b")
        j.record_artifact(j.dir / "bundle.txt", "export")
    out = api.export_project(p, tmp_path / "p.zip")
    q = api.import_project(out)
    assert q.id != p.id and q.name == "zip me"
    assert q.model("m1").handle("v0").sha256 == v0.sha256
    assert (q.root / api.project_artifacts(q)[0].path).read_text() == "b"
    assert [j.state for j in api.project_jobs(q)] == ["done"]


def _zip(members: dict[str, bytes], links: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, "/etc/passwd")
    return buf.getvalue()


@pytest.mark.parametrize("members,links,needle", [
    ({"catalog.sqlite": b"x", "../evil.txt": b"x"}, (), "unsafe path"),
    ({"catalog.sqlite": b"x", "/abs.txt": b"x"}, (), "unsafe path"),
    ({"catalog.sqlite": b"x"}, ("models/link",), "link"),
    ({"models/a.onnx": b"x"}, (), "not an onnx-studio project"),
    ({"catalog.sqlite": b"not sqlite"}, (), "catalog"),
])
def test_import_refuses_unsafe_archives(tmp_path, members, links, needle):
    root = api.projects_root()
    before = sorted(os.listdir(root))
    with pytest.raises(StudioError) as exc:
        api.import_project(_zip(members, links))
    assert_user_message(str(exc.value), needle)
    assert sorted(os.listdir(root)) == before
    assert not (tmp_path.parent / "evil.txt").exists()


def test_tampered_catalog_cannot_point_outside(tmp_path):
    p = api.create_project("t")
    m, _ = api.add_model(p, _tiny(tmp_path / "a.onnx"))
    secret = _tiny(tmp_path / "secret.onnx", "Sigmoid")
    with sqlite3.connect(p.root / "catalog.sqlite") as con:
        con.execute("UPDATE versions SET path=?", (os.path.relpath(secret, p.root),))
    with pytest.raises(StudioError) as exc:
        Project(p.root).model("m1").handle("v0")
    assert_user_message(str(exc.value), "outside")


def test_projects_root_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_STUDIO_PROJECTS_ROOT", str(tmp_path / "elsewhere"))
    p = api.create_project("here")
    assert p.root.parent == (tmp_path / "elsewhere").resolve()
    assert (p.root / "catalog.sqlite").is_file()


def test_datasets_are_copied_into_the_project(tmp_path):
    p = api.create_project("d")
    src = tmp_path / "tensors"
    src.mkdir()
    import numpy as np
    np.save(src / "a.npy", np.zeros((1, 3), np.float32))
    before = (src / "a.npy").read_bytes()
    d = api.add_dataset(p, src, name="calib")
    (row,) = api.project_datasets(p)
    assert row.name == "calib" and row.path == f"data/{d.id}"
    assert (p.root / row.path / "dataset.json").is_file() and (src / "a.npy").read_bytes() == before
    copy = api.import_project(api.export_project(p, tmp_path / "p.zip"))
    assert api.dataset(copy, "calib").samples == d.samples


def test_project_ids_never_read_as_command_line_options():
    from studio.projects.registry import new_id

    assert all(new_id()[0].isalnum() for _ in range(2000))
