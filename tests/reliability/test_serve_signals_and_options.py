"""R44: signals to `onnx-studio serve` stop its Streamlit child and every sandbox worker,
and the port is free within 5 s (the spec's bound, polled); with a browser session's workers:
tests/e2e/test_serve_hardening_browser.py. R47: bad server options give
one line and exit 2 before anything starts."""

from __future__ import annotations

import signal
import socket

import pytest

from studio.cli import main
from tests.conftest import assert_user_message
from tests.servers import StudioServer, all_gone, free_port, port_bindable, reserved_port, wait_until

PORT_FREE_S = 5


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_r44_a_signal_to_serve_ends_the_child_and_frees_the_port(tmp_path, sig):
    serve = StudioServer(tmp_path / "ws")
    try:
        children = serve.descendants()
        assert children, "serve runs the server in a child process"
        serve.send(sig)
        assert wait_until(lambda: port_bindable(serve.port), PORT_FREE_S), "port still bound 5 s after the signal"
        assert wait_until(lambda: all_gone(children), PORT_FREE_S), [p.cmdline()[:3] for p in children]
        serve.proc.wait(PORT_FREE_S)
        if sig != signal.SIGKILL:
            assert serve.proc.returncode == 0
    finally:
        serve.stop()


def _serve_error(capsys, *args: str) -> str:
    code = main(["serve", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err
    assert_user_message(err)
    return err


@pytest.mark.parametrize("port", ["70000", "0", "-1"])
def test_r47_port_out_of_range(capsys, tmp_path, port):
    assert "not a TCP port" in _serve_error(capsys, "--port", port, "--workspace", str(tmp_path / "ws"))


def test_r47_port_in_use(capsys, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert "in use" in _serve_error(capsys, "--port", str(port), "--workspace", str(tmp_path / "ws"))


def test_r47_unwritable_workspace(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with reserved_port() as number:      # serve checks the port first: it must stay bindable for all three
        port = str(number)
        assert "--workspace" in _serve_error(capsys, "--port", port, "--workspace", str(blocker / "ws"))
        assert "--workspace" in _serve_error(capsys, "--port", port, "--workspace", str(blocker))
        assert "--workspace" in _serve_error(capsys, "--port", port, "--workspace", "/proc/onnx-studio-ws")
    assert blocker.read_text() == "not a folder"


def test_r47_host_that_is_not_an_address(capsys, tmp_path):
    err = _serve_error(capsys, "--host", "no such host.invalid", "--port", str(free_port()),
                       "--workspace", str(tmp_path / "ws"))
    assert "--host" in err
