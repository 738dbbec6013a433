"""onnx-studio serve [MODEL] [--port P] [--host H] [--workspace DIR] [--shared]"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from studio.core.errors import StudioError
from studio.core.model import load

NAME = "serve"
HELP = "Serve the studio in the browser (http://localhost:8501 by default)."

APP = Path(__file__).resolve().parent.parent / "ui" / "app.py"

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
                   help="folder whose files may be opened by path in the UI (default: the workspace root)")
    p.add_argument("--shared", action="store_true",
                   help="shared deployment: disable opening files by path and custom-op code execution")
    p.add_argument("--max-upload-mb", type=int, default=2048)
    p.add_argument("--cluster", metavar="ADDR", help="Dask scheduler tcp://HOST:PORT or tls://... for the Batch page "
                                                     "and Profile targets (sets ONNX_STUDIO_CLUSTER; users never "
                                                     "type an address)")


def server_command(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    flags = {**HARDENED_FLAGS, "server.port": str(args.port), "server.address": args.host,
             "server.maxUploadSize": str(args.max_upload_mb)}
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP)]
    cmd += [f"--{k}={v}" for k, v in flags.items()]
    env = dict(os.environ)
    if args.model:
        handle = load(args.model)          # fail here, with a clear message, not in the browser
        env["ONNX_STUDIO_MODEL"] = str(handle.path.resolve())
    if args.workspace:
        env["ONNX_STUDIO_WORKSPACE"] = str(Path(args.workspace).resolve())
    if args.path_root:
        root = Path(args.path_root).resolve()
        if not root.is_dir():
            raise StudioError("--path-root must be an existing folder")
        env["ONNX_STUDIO_PATH_ROOT"] = str(root)
    if args.shared:
        env["ONNX_STUDIO_SHARED"] = "1"
    if getattr(args, "cluster", None):
        from studio.batch.executors import cluster_address

        env["ONNX_STUDIO_CLUSTER"] = cluster_address(args.cluster)
    return cmd, env


def run(args: argparse.Namespace) -> int:
    cmd, env = server_command(args)
    print(f"onnx-studio: serving on http://{'localhost' if args.host == '127.0.0.1' else args.host}:{args.port}",
          flush=True)
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 0
