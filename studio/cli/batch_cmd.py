"""onnx-studio batch PATHS... --stages inspect,check,optimize,precision,profile,export -o OUT
[--stage-requests FILE] [--cluster tcp://HOST:8786] [--target NAME] [--retries N] [--workers N] [--force] [--json]"""

from __future__ import annotations

import argparse
import sys

from studio.batch import facade as batch_api
from studio.cli.common import print_json
from studio.core.fmt import printable
from studio.core.requests import BatchRequest

NAME = "batch"
HELP = "run stages over many models (resumable), on a local pool or a Dask cluster"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help=".onnx files or folders holding them")
    p.add_argument("-o", "--output", required=True, help="output folder (report, state, artifacts)")
    p.add_argument("--stages", default="inspect,check",
                   help="comma-separated: inspect, check, optimize, precision, profile, export (default %(default)s)")
    p.add_argument("--cluster", metavar="ADDR", help="Dask scheduler tcp://HOST:PORT (or env ONNX_STUDIO_CLUSTER); "
                                                     "it must answer within ONNX_STUDIO_CLUSTER_TIMEOUT_S seconds "
                                                     "(default 20)")
    p.add_argument("--target", metavar="NAME", help="run optimize/precision/profile on the cluster worker with "
                                                    "resource target-NAME (optimize: verified there, the "
                                                    "optimized model comes back); 'local' runs them here")
    p.add_argument("--retries", type=int, default=1,
                   help="times a task whose cluster worker died runs again (default 1); then 'worker lost ADDRESS'")
    p.add_argument("--workers", type=int, help="local pool size (default: from cores and memory)")
    p.add_argument("--engines", help="engines for check/profile (comma-separated)")
    p.add_argument("--stage-requests", metavar="FILE",
                   help="a .json/.toml file {stage: {option: value}}: each stage's request with every option its "
                        "own command takes (check, optimize, precision, profile, export; the keys of the "
                        "request's --json form, over the batch's defaults); --engines replaces theirs")
    p.add_argument("--force", action="store_true", help="run finished model x stage pairs again")
    p.add_argument("--tls-ca-file", help="TLS CA for the cluster")
    p.add_argument("--tls-cert", help="TLS client certificate for the cluster")
    p.add_argument("--tls-key", help="TLS client key for the cluster")
    p.add_argument("--json", action="store_true", help="print the batch result as JSON")


def request_of(args: argparse.Namespace) -> BatchRequest:
    """The one ``BatchRequest`` these flags ask for."""
    requests = batch_api.read_stage_requests(args.stage_requests) if args.stage_requests else {}
    return BatchRequest(stages=args.stages, engines=args.engines, force=args.force, stage_requests=requests)


def run(args: argparse.Namespace) -> int:
    request = request_of(args)

    def progress(done: int, total: int, eta: float | None, outcome) -> None:
        if args.json or outcome is None:
            return
        eta_text = f", ETA {eta:.0f} s" if eta is not None and done < total else ""
        print(f"[{done}/{total}{eta_text}] {printable(outcome.model, 60)} {outcome.stage}: {outcome.status} "
              f"- {printable(outcome.verdict, 120)}", file=sys.stderr)

    result = batch_api.batch(args.paths, args.output, request, cluster=args.cluster, target=args.target,
                             retries=args.retries, workers=args.workers,
                             tls=(args.tls_ca_file, args.tls_cert, args.tls_key), on_progress=progress)
    if args.json:
        print_json(result.to_dict())
    else:
        for row in result.rows:
            cells = "  ".join(f"{s}={row.outcomes[s].status}" for s in result.stages if s in row.outcomes)
            print(f"{row.status():<12} {printable(row.model.name, 50):<50} {cells or printable(row.model.error or '')}")
        if result.passed_over:
            print(f"{printable(batch_api.skipped_summary(result.passed_over), 600)}", file=sys.stderr)
        print(f"{len(result.rows)} model(s), {result.ran} task(s) run, {result.skipped} already finished, "
              f"{result.seconds:.1f} s on the {result.executor} executor; report: {result.files.get('html')}")
    return 0 if result.ok else 1
