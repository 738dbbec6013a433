"""The facade reads a dataset request's recipe options itself (issue 34, item 2: one request per operation).
``data add`` and ``data eval`` used to resolve the recipe flags in the CLI and hand the facade the result, so
a page or a script passing the same ``DatasetAddRequest``/``DatasetEvalRequest`` got the model's suggestion
instead. Now the request alone gives the same dataset as the CLI.

Oracles: the recipe worked out by hand (the image_classifier sample's ImageNet suggestion with the request's
mean and std over it), the CLI run with the same flags, and what the real golden-output step received (a spy
that calls through)."""

from __future__ import annotations

import json

from sample_models.catalog import path_of
from studio import api
from studio.cli import main
from studio.core.requests import DatasetAddRequest, DatasetEvalRequest, RecipeRequest
from tests.photos import photo_folder
from tests.requirements import require_module

require_module("skimage.data")

RECIPE = RecipeRequest(fields={"mean": "0.5,0.5,0.5", "std": "0.25,0.25,0.25"})


def test_a_request_alone_gives_the_dataset_the_cli_gives(tmp_path, capsys):
    photos = photo_folder(tmp_path / "photos", n_per_class=1)
    model = str(path_of("image_classifier"))
    request = DatasetAddRequest(name="real", model=model, recipe=RECIPE)
    ds = api.add_dataset(api.open_project("via-api", create=True), photos, request)   # no model, no recipe given
    suggested, _why = api.suggest_preprocessing(api.load(model))
    assert suggested.mean != (0.5, 0.5, 0.5)                       # the request changes what the model suggests
    assert ds.recipe.to_dict() == {**suggested.to_dict(), "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25],
                                   "preset": "custom"}             # a preset changed by hand is its own
    assert "--mean 0.5,0.5,0.5 --std 0.25,0.25,0.25" in ds.recipe_reason and "suggestion" in ds.recipe_reason

    assert main(["data", "add", str(photos), "--project", "via-cli", "--name", "real", "--model", model,
                 "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["recipe"] == ds.recipe.to_dict()
    assert cli["recipe_reason"] == ds.recipe_reason.replace("set in the request", "set on the command line")


def test_an_eval_request_runs_on_its_own_recipe(tmp_path, monkeypatch):
    photos = photo_folder(tmp_path / "photos", n_per_class=1)
    model = str(path_of("image_classifier"))
    ds = api.add_dataset(api.open_project("evals", create=True), photos, DatasetAddRequest(name="real", model=model))
    import studio.facade.data as room

    seen = []
    real = room.golden_outputs

    def spy(dataset, *args, **kwargs):
        seen.append(dataset)
        return real(dataset, *args, **kwargs)

    monkeypatch.setattr(room, "golden_outputs", spy)
    report = api.evaluate_on_dataset(ds, DatasetEvalRequest(model=model, recipe=RECIPE, limit=2))
    assert report.samples >= 1
    (used,) = seen
    assert (used.recipe.mean, used.recipe.std) == ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    assert used.recipe_reason == "given for this run: --mean 0.5,0.5,0.5 --std 0.25,0.25,0.25"
    assert api.dataset(api.open_project("evals"), "real").recipe == ds.recipe      # for this run only: not saved
