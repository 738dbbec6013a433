"""studio.core.engines.capture: what C code prints inside ``captured_output`` is in the file when the block
ends, also when stdout is a pipe (C stdio then buffers fully; MNN's quantizer reports success with printf)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

_CODE = """
import ctypes, sys
from pathlib import Path
from studio.core.engines.capture import captured_output, read_log
libc = ctypes.CDLL(None)
libc.printf(b"before the block\\n")
with captured_output(Path(sys.argv[1])):
    libc.printf(b"C says done\\n")
print("LOG=" + repr(read_log(Path(sys.argv[1]))))
"""


def test_c_printf_inside_the_block_is_in_the_log_with_stdout_a_pipe(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}   # that would unbuffer C stdio too
    r = subprocess.run([sys.executable, "-c", _CODE, str(tmp_path / "log.txt")], capture_output=True, text=True,
                       cwd=ROOT, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "LOG='C says done\\n'" in r.stdout          # in the file, without what was printed before the block
    assert r.stdout.count("C says done") == 1          # and not leaked to the real stdout afterwards
    assert r.stdout.startswith("before the block\n")
