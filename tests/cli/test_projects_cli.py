"""`onnx-studio projects ...` and `--project NAME` on the result-producing commands:
the model lands once per content, each run is a job row, results are kept."""

from __future__ import annotations

import json
import zipfile

from studio import api
from studio.cli import main
from tests.conftest import SAMPLES, assert_user_message, sha256_file

CNN = SAMPLES / "cnn_unfused.onnx"


def _show(capsys, name: str) -> dict:
    capsys.readouterr()
    assert main(["projects", "show", name, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_and_optimize_store_results_in_the_project(tmp_path, capsys):
    before = sha256_file(CNN)
    assert main(["inspect", str(CNN), "--project", "demo", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["sha256"]            # stdout stays the plain JSON
    assert "stored in project 'demo'" in out.err
    assert main(["optimize", str(CNN), "-o", str(tmp_path / "opt.onnx"), "--project", "demo"]) == 0
    data = _show(capsys, "demo")
    [model] = data["models"]                        # one model: the same content is not added twice
    assert [v["id"] for v in model["versions"]] == ["v0", "v1"]
    v1 = model["versions"][1]
    assert v1["parent"] == "v0" and v1["label"] == "safe" and v1["provenance"]["pipeline"]
    assert v1["sha256"] == api.load(tmp_path / "opt.onnx").sha256
    assert [(j["kind"], j["state"]) for j in data["jobs"]] == [("inspect", "done"), ("optimize", "done")]
    assert data["jobs"][1]["args"]["output"] == str(tmp_path / "opt.onnx")
    kinds = {a["kind"]: a["path"] for a in data["artifacts"]}
    assert set(kinds) == {"inspect", "optimize"}
    project = api.open_project("demo")
    assert json.loads((project.root / kinds["optimize"]).read_text())["records"]
    assert sha256_file(CNN) == before


def test_check_and_profile_keep_their_reports(capsys):
    assert main(["check", str(CNN), "--engines", "tensorrt", "--project", "p2", "--json"]) in (0, 1)
    assert main(["profile", str(CNN), "--warmup", "1", "--rounds", "2", "--project", "p2", "--json"]) == 0
    data = _show(capsys, "p2")
    assert [j["kind"] for j in data["jobs"]] == ["check", "profile"]
    assert {j["state"] for j in data["jobs"]} == {"done"}
    assert [a["kind"] for a in data["artifacts"]] == ["check", "profile"]


def test_a_failing_command_closes_its_job_as_failed(tmp_path, capsys):
    bad = tmp_path / "out.txt"
    assert main(["optimize", str(CNN), "-o", str(bad), "--project", "p3"]) == 2
    assert "-o must name a .onnx file" in capsys.readouterr().err
    jobs = _show(capsys, "p3")["jobs"]
    assert [(j["kind"], j["state"]) for j in jobs] == [("optimize", "failed")]


def test_projects_list_create_rename_export_import_rm(tmp_path, capsys):
    root = tmp_path / "root"
    assert main(["--projects-root", str(root), "projects", "create", "alpha", "--json"]) == 0
    pid = json.loads(capsys.readouterr().out)["id"]
    assert (root / pid / "catalog.sqlite").is_file()
    assert main(["--projects-root", str(root), "inspect", str(CNN), "--project", pid]) == 0
    assert main(["--projects-root", str(root), "projects", "rename", pid, "beta"]) == 0
    capsys.readouterr()
    assert main(["--projects-root", str(root), "projects", "list", "--json"]) == 0
    [info] = json.loads(capsys.readouterr().out)
    assert (info["id"], info["name"], info["models"], info["jobs"]) == (pid, "beta", 1, 1)
    archive = tmp_path / "beta.zip"
    assert main(["--projects-root", str(root), "projects", "export", "beta", "-o", str(archive)]) == 0
    assert "catalog.sqlite" in zipfile.ZipFile(archive).namelist()
    assert main(["--projects-root", str(root), "projects", "import", str(archive), "--name", "gamma"]) == 0
    capsys.readouterr()
    assert main(["--projects-root", str(root), "projects", "rm", "beta"]) == 2
    assert_user_message(capsys.readouterr().err.removeprefix("error: ").strip(), "--yes")
    assert main(["--projects-root", str(root), "projects", "rm", "beta", "--yes"]) == 0
    capsys.readouterr()
    assert main(["--projects-root", str(root), "projects", "list", "--json"]) == 0
    [left] = json.loads(capsys.readouterr().out)
    assert left["name"] == "gamma" and left["id"] != pid and left["models"] == 1
    assert main(["--projects-root", str(root), "projects", "show", "nope"]) == 2
    assert_user_message(capsys.readouterr().err.removeprefix("error: ").strip(), "no project")


def test_import_refuses_a_zip_with_a_dotdot_member(tmp_path, capsys):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("catalog.sqlite", b"x")
        zf.writestr("../../escaped.txt", b"x")
    assert main(["projects", "import", str(archive)]) == 2
    assert_user_message(capsys.readouterr().err.removeprefix("error: ").strip(), "unsafe path")
    assert not (tmp_path.parent / "escaped.txt").exists() and api.list_projects() == []


def test_projects_root_after_the_command_and_for_serve(tmp_path, capsys):
    from studio.cli import build_parser
    from studio.cli.serve_cmd import server_command

    root = tmp_path / "r2"
    assert main(["projects", "create", "x", "--projects-root", str(root)]) == 0
    assert len(list(root.iterdir())) == 1
    args = build_parser().parse_args(["serve", "--projects-root", str(root)])
    assert args.projects_root_here == str(root)
    main(["projects", "list", "--projects-root", str(root)])
    _, env = server_command(build_parser().parse_args(["serve"]))
    assert env["ONNX_STUDIO_PROJECTS_ROOT"] == str(root.resolve())     # the server inherits it
