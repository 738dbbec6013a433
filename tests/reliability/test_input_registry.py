"""R32's input protection holds for as long as the run that read the input: the registry's cap
(4,096 entries) never drops an entry a live run holds, although every dataset folder registers up
to 2,000 files. Past the cap only entries of finished runs go, oldest first."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.core import outputs
from studio.core.errors import StudioError
from studio.core.paths import user_data_path
from tests.conftest import sha256_file


def _model(path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _dataset_folder(folder, n: int = 2100):
    folder.mkdir()
    for i in range(n):
        (folder / f"s{i:05d}.npy").write_bytes(b"\x93NUMPY")
    return folder


def _refused(path) -> bool:
    try:
        outputs.check_destination(path)
    except outputs.OutputError as exc:
        return "would overwrite the input" in str(exc)
    return False


@pytest.fixture
def cap():
    """The cap, with an empty registry (entries earlier tests in this worker left would fill it); afterwards
    the registry is given back as it was (these tests register thousands of files)."""
    with outputs._registry_lock:
        before = (dict(outputs._registry), set(outputs._process_held), dict(outputs._held))
        outputs._registry.clear()
        outputs._process_held.clear()
        outputs._held.clear()
    yield outputs._MAX_REGISTERED
    with outputs._registry_lock:
        outputs._registry.clear()
        outputs._registry.update(before[0])
        outputs._process_held.clear()
        outputs._process_held.update(before[1])
        outputs._held.clear()
        outputs._held.update(before[2])


def test_the_open_model_stays_protected_after_dataset_folders(tmp_path, cap):
    model = _model(tmp_path / "model.onnx")
    handle = api.load(model)                                     # the open model (registered by load)
    folders = [user_data_path(_dataset_folder(tmp_path / n), label="dataset") for n in ("a", "b", "calib")]
    assert len(outputs.iter_protected()) > cap                   # the folders pushed past the cap...
    assert _refused(model), "the open model lost its protection after the dataset folders"   # ...yet
    assert all(sum(map(_refused, f.iterdir())) == 2000 for f in folders)
    # Through the facade as a user meets it: optimizing onto the model file is refused, the model kept.
    before = sha256_file(model)
    with pytest.raises(StudioError) as exc:
        api.optimize(handle, preset="safe", verify=False, out_path=model)
    assert "would overwrite the input" in str(exc.value)
    assert sha256_file(model) == before


def test_a_live_run_keeps_its_entries_and_a_finished_run_gives_them_up(tmp_path, cap):
    with api.input_run():                                        # a server request that opened the model
        model = _model(tmp_path / "model.onnx")
        api.load(model)
        with api.input_run():                                    # another request, still running
            user_data_path(_dataset_folder(tmp_path / "a"), label="dataset")
            user_data_path(_dataset_folder(tmp_path / "b"), label="dataset")
            assert _refused(model)                               # both runs alive: nothing of theirs dropped
        assert _refused(model)                                   # the outer run is still alive
    a_files = sorted((tmp_path / "a").iterdir()) + sorted((tmp_path / "b").iterdir())
    assert sum(map(_refused, a_files)) == 4000                   # 2,000 registered per folder, all held so far
    # Both runs ended: their entries may now go, oldest first, once new ones need the room.
    with api.input_run():
        c = user_data_path(_dataset_folder(tmp_path / "c"), label="dataset")
        c_held = [p for p in c.iterdir() if _refused(p)]
        assert len(c_held) == 2000                               # the live run keeps every one of its files
        assert not _refused(model)                               # the oldest entry of a finished run went first
        assert sum(map(_refused, a_files)) < 4000
