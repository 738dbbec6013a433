"""Names are labels, ids are identity: ``serve MODEL`` opens the newest project holding that
model's content (sha256), or a new one, however many projects share its name; opening by name
never errors; a link to a project that does not exist says so in words. And no page shows
"unexpected error" in the states a user reaches first (every such message is a bug)."""

from __future__ import annotations

import time

import pytest

from studio import api
from studio.cli import main
from tests.conftest import SAMPLES, assert_user_message

SAMPLE = SAMPLES / "cnn_unfused.onnx"
PAGES = ["views/overview.py", "views/nodes.py", "views/graph.py", "views/compatibility.py", "views/verify.py",
         "views/plugins.py", "views/optimize.py", "views/precision.py", "views/profile.py", "views/export.py",
         "views/batch.py", "views/projects.py", "views/data.py"]


def _errors(at) -> list[str]:
    return [e.value for e in at.error]


def _no_unexpected(at) -> None:
    assert not at.exception, at.exception
    bad = [e for e in _errors(at) if "unexpected error" in e.lower()]
    assert not bad, bad


def _two_named(name: str) -> list:
    ps = [api.create_project(name), api.create_project(name)]
    assert len([i for i in api.list_projects() if i.name == name]) == 2
    return ps


def test_serve_model_with_two_projects_of_its_name_opens_a_new_one(app):
    # What `make run` met after two servers on the sample: two projects named after it, neither with
    # this content (or emptied since). The home page used to read "unexpected error (Exception); ...
    # 2 projects are named 'cnn_unfused'; use the id".
    named = _two_named("cnn_unfused")
    at = app(str(SAMPLE)).run()
    _no_unexpected(at)
    assert not _errors(at), _errors(at)
    pid = at.session_state["onnx_studio_project"]
    assert pid not in {p.id for p in named}                     # neither of them: they do not hold the model
    assert api.open_project(pid).name == "cnn_unfused"
    [m] = api.project_models(pid)
    assert api.project_model(pid, m.id).versions[0].sha256 == api.load(SAMPLE).sha256
    assert any(x.label == "Nodes" and x.value == "37" for x in at.metric)


def test_serve_model_reuses_the_newest_project_holding_its_content(app):
    older, newer = _two_named("cnn_unfused")
    other = api.create_project("renamed by the user")      # the name does not matter: the content does
    for p in (older, other, newer):
        api.add_model(p, SAMPLE)
        time.sleep(0.01)                                    # distinct "changed" times (the newest: newer)
    at = app(str(SAMPLE)).run()
    _no_unexpected(at)
    assert at.session_state["onnx_studio_project"] == newer.id
    assert len(api.list_projects()) == 3                     # nothing new was made
    # Changing the other one makes it the newest holder: the next `serve` opens that one.
    time.sleep(0.01)
    api.rename_project(other, "renamed again")
    again = app(str(SAMPLE)).run()
    assert again.session_state["onnx_studio_project"] == other.id


def test_opening_by_name_never_errors_but_renaming_by_name_does(capsys):
    older, newer = _two_named("twins")
    time.sleep(0.01)
    api.rename_project(newer, "twins")                       # changed last
    assert api.open_project("twins").id == newer.id          # the most recently changed one
    assert main(["projects", "show", "twins"]) == 0
    assert newer.id in capsys.readouterr().out
    # Renaming or deleting by a name two projects share could hit the wrong one: refused, with the ids.
    assert main(["projects", "rm", "twins", "--yes"]) == 2
    err = capsys.readouterr().err.strip()
    assert_user_message(err, "2 projects are named 'twins'", older.id, newer.id)
    assert older.root.exists() and newer.root.exists()


@pytest.mark.parametrize("link", ["AAAAAAAAAAAAAAAAAAAAAA", "not-an-id", "../../etc"])
def test_a_link_to_a_missing_project_says_so(app, link):
    at = app()
    at.query_params["project"] = link
    at.run()
    _no_unexpected(at)
    assert any("does not exist" in e for e in _errors(at)), _errors(at)
    assert "onnx_studio_project" not in at.session_state


# The Compatibility page's case opens the sample on the default engines (five, two converting): the same page,
# sample and checks as test_compatibility_page's test_mnn_and_litert_columns, which does them in a full run.
_COVERED = {"views/compatibility.py": "test_mnn_and_litert_columns"}


@pytest.mark.slow
@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.covered_by(_COVERED[p])) if p in _COVERED else p
                                  for p in PAGES])
def test_no_page_shows_an_unexpected_error(app, page):
    """Every page before a model is open, then with the sample open (the states a user meets first)."""
    empty = app()
    empty.switch_page(page).run()
    _no_unexpected(empty)
    at = app(str(SAMPLE)).run()
    at.switch_page(page).run()
    _no_unexpected(at)
