"""Third-party telemetry off: the studio talks to loopback only and never reports on the
models it is shown.

Two engines phone home by default:

* ONNX Runtime (1.29 and later, Linux/macOS) uploads 1DS events and keeps a device id under
  ``~/.cache/Microsoft/DeveloperTools``; ``ORT_DISABLE_TELEMETRY=1`` (``ORT_TELEMETRY_DISABLED``
  in later releases), set before the first session, turns all of it off.
* OpenVINO's ``import openvino`` (and NNCF) send Google Analytics events from a forked
  process that, with no network, lingers after its worker is gone. Both fall back to their
  own stubs when ``openvino_telemetry`` cannot be imported, which is what this arranges.

A user who set one of the variables keeps their choice; nothing is written anywhere.
"""

from __future__ import annotations

import os
import sys

__all__ = ["ORT_VARIABLES", "quiet_third_party_telemetry"]

ORT_VARIABLES = ("ORT_DISABLE_TELEMETRY", "ORT_TELEMETRY_DISABLED")


def quiet_third_party_telemetry() -> None:
    """Turn ONNX Runtime's and OpenVINO/NNCF's telemetry off for this process and its workers."""
    for name in ORT_VARIABLES:
        os.environ.setdefault(name, "1")
    module = sys.modules.get("openvino_telemetry")
    if module is None:
        # None in sys.modules makes `import openvino_telemetry` raise ImportError: the stubs are used.
        sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]
        return
    telemetry = getattr(module, "Telemetry", None)      # imported before the studio: silence it instead
    for method in ("send_event", "start_session", "end_session", "send_error", "send_stack_trace",
                   "send_opt_in_event", "force_shutdown"):
        if telemetry is not None and hasattr(telemetry, method):
            setattr(telemetry, method, lambda *args, **kwargs: None)
