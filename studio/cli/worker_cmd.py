"""onnx-studio worker --scheduler tcp://HOST:8786 [--target NAME]: join a Dask cluster as a studio worker.

The same as ``dask worker ADDR --resources target-NAME=1 --nthreads 1``, plus what the
studio needs on a deployment machine: the target name in ONNX_STUDIO_TARGET (so every
figure it measures is labelled with it) and a printout of the machine's facts. The dask worker is a
supervised child (``studio.cli.children``): SIGTERM/SIGINT stop it and this command exits with its
status; a SIGKILL of this command ends it too (R54)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from studio.cli import children
from studio.core.errors import StudioError
from studio.batch.facade import cluster_address
from studio.batch.facade import machine_facts
from studio.core.error_codes import ErrorCode

NAME = "worker"
HELP = "join a Dask cluster as a worker (a remote target for profile/precision/batch)"
_TARGET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
STOP_GRACE_S = 10.0          # the dask worker's own graceful close (nanny, worker process), then SIGKILL


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler", required=True, help="scheduler address tcp://HOST:PORT")
    p.add_argument("--target", help="name of this deployment target (resource target-NAME=1)")
    p.add_argument("--host", default="127.0.0.1", help="address the worker listens on (default %(default)s)")
    p.add_argument("--nthreads", type=int, default=1, help="tasks at once on this worker (default 1: timing)")
    p.add_argument("--shared-dir", metavar="DIR",
                   help="a folder this target shares with its clients (mounted at the same path there): an "
                        "optimized model too large for one answer (ONNX_STUDIO_REMOTE_RETURN_MAX_BYTES, default 2 GiB) "
                        "is left there for the client instead of pulled in chunks (sets ONNX_STUDIO_SHARED_DIR)")
    p.add_argument("--print-command", action="store_true", help="print the dask worker command and exit")
    p.add_argument("--tls-ca-file", help="TLS CA (PEM) for a tls:// scheduler (passed to dask worker)")
    p.add_argument("--tls-cert", help="this worker's TLS certificate (PEM)")
    p.add_argument("--tls-key", help="this worker's TLS private key (PEM)")


def command(args: argparse.Namespace) -> list[str]:
    address = cluster_address(args.scheduler)
    cmd = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", str(args.nthreads),
           "--host", args.host, "--no-dashboard"]
    for flag in ("tls_ca_file", "tls_cert", "tls_key"):
        value = getattr(args, flag, None)
        if value:
            cmd += [f"--{flag.replace('_', '-')}", value]
    if args.target:
        if not _TARGET.match(args.target):
            raise StudioError("a target name is letters, digits, '.', '_' or '-' (at most 40)",
                              code=ErrorCode.BAD_OPTION)
        cmd += ["--resources", f"target-{args.target}=1", "--name", f"target-{args.target}"]
    return cmd


def run(args: argparse.Namespace) -> int:
    cmd = command(args)
    if args.print_command:
        print(" ".join(cmd))
        return 0
    env = dict(os.environ)
    if args.target:
        env["ONNX_STUDIO_TARGET"] = args.target
    if args.shared_dir:
        if not os.path.isdir(args.shared_dir):
            raise StudioError(f"--shared-dir '{args.shared_dir[:200]}' is not a folder", code=ErrorCode.NOT_FOUND)
        env["ONNX_STUDIO_SHARED_DIR"] = os.path.abspath(args.shared_dir)
    print(json.dumps({"joining": cmd[3], "target": args.target, "machine": machine_facts()}), file=sys.stderr,
          flush=True)
    code, _ = children.run_child(cmd, env, grace_s=STOP_GRACE_S)   # SIGTERM/SIGINT reach the dask worker
    return children.exit_status(code)
