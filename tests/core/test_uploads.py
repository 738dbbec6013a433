"""R11: uploads (single file, several files, zip bundles) land inside the
upload folder or are refused before extraction."""

from __future__ import annotations

import io
import stat
import zipfile

import pytest

from studio.core.errors import ModelLoadError
from studio.core.uploads import UploadedFile, write_upload
from studio.core.workspace import Workspace
from tests.conftest import SAMPLES, assert_user_message


def _zip(members: dict[str, bytes], symlinks: dict[str, str] | None = None, deflate: bool = False) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buf.getvalue()


def _files_under(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_model_with_external_data_as_two_files(tmp_path):
    files = [UploadedFile("external_data.onnx", (SAMPLES / "external_data.onnx").read_bytes()),
             UploadedFile("external_data.onnx.data", (SAMPLES / "external_data.onnx.data").read_bytes())]
    ws = Workspace(tmp_path / "ws")
    v = ws.add_upload(files)
    h = ws.handle(v.id)
    assert h.external_files and h.scan.external_bytes > 0


def test_model_as_zip_bundle(tmp_path):
    data = _zip({"bundle/external_data.onnx": (SAMPLES / "external_data.onnx").read_bytes(),
                 "bundle/external_data.onnx.data": (SAMPLES / "external_data.onnx.data").read_bytes()})
    ws = Workspace(tmp_path / "ws")
    v = ws.add_upload([UploadedFile("model.zip", data)])
    assert ws.handle(v.id).external_files


@pytest.mark.parametrize("members,symlinks,needle", [
    ({"../x.onnx": b"x"}, None, "unsafe path"),
    ({"/abs/x.onnx": b"x"}, None, "unsafe path"),
    ({"a/../../x.onnx": b"x"}, None, "unsafe path"),
    ({"m.onnx": b"x"}, {"link.data": "/etc/passwd"}, "link"),
])
def test_r11_hostile_zip_members(tmp_path, members, symlinks, needle):
    dest = tmp_path / "out" / "upload"
    with pytest.raises(ModelLoadError) as info:
        write_upload([UploadedFile("b.zip", _zip(members, symlinks))], dest)
    assert_user_message(str(info.value), needle)
    assert not (tmp_path / "x.onnx").exists() and not (tmp_path / "out" / "x.onnx").exists()
    assert not dest.exists() or _files_under(dest) == []


def test_r11_too_many_members(tmp_path):
    with pytest.raises(ModelLoadError) as info:
        write_upload([UploadedFile("b.zip", _zip({f"f{i}": b"" for i in range(1001)}))], tmp_path / "u")
    assert_user_message(str(info.value), "members")


def test_r11_zip_bomb(tmp_path):
    bomb = _zip({"m.onnx": b"\0" * (64 * 2**20)}, deflate=True)
    assert len(bomb) < 2**20
    with pytest.raises(ModelLoadError) as info:
        write_upload([UploadedFile("b.zip", bomb)], tmp_path / "u")
    assert_user_message(str(info.value), "zip bomb")


def test_hostile_upload_file_names_stay_inside(tmp_path):
    dest = tmp_path / "u"
    p = write_upload([UploadedFile("../../evil.onnx", b"\x08\x08")], dest)
    assert p.parent == dest and p.name == "evil.onnx"
    assert not (tmp_path / "evil.onnx").exists()


def test_workspace_upload_of_junk_leaves_no_version(tmp_path):
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(ModelLoadError):
        ws.add_upload([UploadedFile("m.onnx", b"<html>nope</html>")])
    assert ws.versions == ()
    assert not any(p.name.startswith("v0") for p in (tmp_path / "ws").iterdir())
