"""The studio talks to loopback only: ONNX Runtime's 1DS telemetry and OpenVINO/NNCF's Google
Analytics are off in the studio and in its workers. Before, every worker that imported
OpenVINO forked a sender that outlived it (found as orphaned 1-thread "workers" after a run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from studio import api
from tests.conftest import SAMPLES

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return out


def test_importing_the_studio_turns_engine_telemetry_off():
    code = ("import os, sys, studio, openvino, nncf\n"
            "from nncf.telemetry.wrapper import telemetry\n"
            "print(os.environ['ORT_DISABLE_TELEMETRY'], sys.modules.get('openvino_telemetry'),"
            " type(telemetry).__name__)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORT_", "NNCF_"))}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1", "None", "MagicMock"], out.stdout        # NNCF's own stub


def test_onnx_runtime_keeps_no_device_id_or_event_store(tmp_path):
    """With its telemetry on, ONNX Runtime writes ~/.cache/Microsoft/DeveloperTools/.onnxruntime
    (a device id and an event database) at the first session: outside any output folder."""
    code = (f"import studio, onnxruntime as ort\n"
            f"ort.InferenceSession({str(SAMPLES / 'cnn_unfused.onnx')!r}, providers=['CPUExecutionProvider'])\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORT_")} | {"HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert list(tmp_path.rglob("*")) == []


def test_a_users_own_choice_is_kept(monkeypatch):
    from studio.core.telemetry import quiet_third_party_telemetry

    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")
    quiet_third_party_telemetry()
    assert os.environ["ORT_DISABLE_TELEMETRY"] == "0"


def test_openvino_workers_leave_no_process_behind():
    api.check(api.load(SAMPLES / "cnn_unfused.onnx"), "openvino", pool_key="telemetry-test")
    workers = [p for p in _children(os.getpid())
               if "studio.core.worker" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")]
    assert workers
    for w in workers:
        assert _children(w) == [], f"worker {w} has child processes (a telemetry sender?)"
