"""onnx-studio serve [MODEL] [--port P] [--host H] [--workspace DIR] [--shared] [--allowed-host NAME]

The server is a Streamlit child process (``studio/ui/onnx_studio_server.py``: the app
behind ``studio.ui.webguard``). This process checks the options first (one-line errors,
exit 2), then supervises the child: SIGTERM/SIGINT/SIGHUP stop it and its sandbox
workers, and the child gets ``PR_SET_PDEATHSIG`` so even a SIGKILL of this process ends it.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from studio.cli import children
from studio.core.errors import StudioError
from studio.core.model import load
from studio.core.hosts import ALLOWED_HOSTS_ENV, allowed_hosts, is_loopback
from studio.batch.facade import cluster_address

NAME = "serve"
HELP = "Serve the studio in the browser (http://localhost:8501 by default)."

ENTRY = Path(__file__).resolve().parent.parent / "ui" / "onnx_studio_server.py"
STOP_GRACE_S = 3.0           # SIGTERM, then SIGKILL: the port is free within 5 s of the signal

# Hardened server settings, passed as flags so they hold wherever the studio is
# started from (the repo's .streamlit/config.toml says the same for `streamlit run`).
HARDENED_FLAGS = {
    "server.headless": "true",
    "server.enableXsrfProtection": "true",
    "server.enableCORS": "true",
    "server.fileWatcherType": "none",
    "server.runOnSave": "false",
    "server.enableStaticServing": "false",
    "server.maxMessageSize": "400",
    "runner.magicEnabled": "false",
    "client.showErrorDetails": "none",
    "client.toolbarMode": "minimal",
    "browser.gatherUsageStats": "false",
    "global.developmentMode": "false",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="model to open in every new session (copied into the session)")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--workspace", default=None, help="workspace root (default ./workspace)")
    p.add_argument("--path-root", default=None,
                   help="folder whose files may be opened by path in the UI (default: the workspace's "
                        "import/ folder)")
    p.add_argument("--shared", action="store_true",
                   help="shared deployment: disable opening files by path and custom-op code execution")
    p.add_argument("--trust-network", action="store_true",
                   help="with a non-loopback --host: keep path input and code execution on (not shared)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="extra Host name the server answers to (a reverse proxy's name); repeatable")
    p.add_argument("--max-upload-mb", type=int, default=2048)
    p.add_argument("--cluster", metavar="ADDR", help="Dask scheduler tcp://HOST:PORT or tls://... for the Batch page "
                                                     "and Profile targets (sets ONNX_STUDIO_CLUSTER; users never "
                                                     "type an address)")


def _check_port(host: str, port: int) -> None:
    """The port must be a valid number that this host can bind now (not in use)."""
    if not 1 <= port <= 65535:
        raise StudioError(f"--port {port} is not a TCP port (1-65535)")
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        raise StudioError(f"--host '{host[:60]}' is not an address of this machine") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as the server binds
        try:
            s.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise StudioError(f"port {port} on {host} is in use; stop the other server or choose "
                                  "another with --port") from None
            if exc.errno == errno.EACCES:
                raise StudioError(f"port {port} needs privileges here; choose one above 1023 with --port") from None
            raise StudioError(f"cannot bind {host}:{port} ({exc.strerror or exc})") from None


def writable_folder(path: str, label: str) -> Path:
    """``path`` as an existing folder this process can write to (created if missing)."""
    folder = Path(path).expanduser().absolute()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        reason = ("is not a folder" if exc.errno in (errno.ENOTDIR, errno.EEXIST)
                  else f"is not writable ({exc.strerror or exc})")
        raise StudioError(f"{label} '{folder.name or path}' {reason}; choose a folder you can write to") from None
    return folder.resolve()


def network_mode(host: str, shared: bool, trust_network: bool) -> tuple[bool, str | None]:
    """Whether the server runs in shared mode, and the warning a non-loopback bind prints.

    Anyone who can reach a non-loopback address can use the studio, so such a bind is
    shared (no path input, no custom-op code) unless ``--trust-network`` says otherwise."""
    if is_loopback(host):
        return shared, None
    on = shared or not trust_network
    mode = ("shared mode: path input and custom-op code are off (--trust-network keeps them)" if on
            else "path input and custom-op code stay ON (--trust-network)")
    return on, (f"warning: {host} is reachable from other machines and anyone who reaches it can use "
                f"the studio; {mode}")


def server_command(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The child's command line and environment; every option is checked here first."""
    if args.max_upload_mb < 1:
        raise StudioError("--max-upload-mb must be at least 1")
    _check_port(args.host, args.port)
    flags = {**HARDENED_FLAGS, "server.port": str(args.port), "server.address": args.host,
             "server.maxUploadSize": str(args.max_upload_mb)}
    cmd = [sys.executable, "-m", "streamlit", "run", str(ENTRY)]
    cmd += [f"--{k}={v}" for k, v in flags.items()]
    env = dict(os.environ)
    if args.model:
        handle = load(args.model)          # fail here, with a clear message, not in the browser
        env["ONNX_STUDIO_MODEL"] = str(handle.path.resolve())
    workspace = args.workspace or env.get("ONNX_STUDIO_WORKSPACE") or "workspace"
    env["ONNX_STUDIO_WORKSPACE"] = str(writable_folder(workspace, "--workspace"))
    if args.path_root:
        root = Path(args.path_root).resolve()
        if not root.is_dir():
            raise StudioError("--path-root must be an existing folder")
        env["ONNX_STUDIO_PATH_ROOT"] = str(root)
    if network_mode(args.host, args.shared, args.trust_network)[0]:
        env["ONNX_STUDIO_SHARED"] = "1"
    env[ALLOWED_HOSTS_ENV] = ",".join(sorted(allowed_hosts(args.host, args.allowed_host)))
    if getattr(args, "cluster", None):
        env["ONNX_STUDIO_CLUSTER"] = cluster_address(args.cluster)
    return cmd, env


def supervise(proc: subprocess.Popen) -> tuple[int, bool]:
    """Wait for the child; SIGTERM/SIGINT/SIGHUP stop it (SIGKILL after the grace period)."""
    return children.supervise(proc, STOP_GRACE_S)


def run(args: argparse.Namespace) -> int:
    cmd, env = server_command(args)
    warning = network_mode(args.host, args.shared, args.trust_network)[1]
    if warning:
        print(f"onnx-studio: {warning}", file=sys.stderr, flush=True)
    shown = "localhost" if args.host == "127.0.0.1" else (f"[{args.host}]" if ":" in args.host else args.host)
    print(f"onnx-studio: serving on http://{shown}:{args.port}", flush=True)
    proc = subprocess.Popen(cmd, env=env, preexec_fn=children.die_with_parent, start_new_session=True)
    code, stopped = supervise(proc)
    if stopped:
        return 0
    if code != 0:
        raise StudioError(f"the server stopped with exit code {code}; see the messages above")
    return 0
