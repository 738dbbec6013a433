"""--target / --targets / --cluster / TLS flags shared by ``profile`` and ``precision``, and the
printing of results measured on several targets (each labelled with its machine)."""

from __future__ import annotations

import argparse
import re
import sys

from studio.core.errors import StudioError
from studio.core.fmt import printable
from studio.batch.facade import side_by_side
from studio.core.error_codes import ErrorCode

_TARGET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


def add_arguments(p: argparse.ArgumentParser, *, many: bool = True) -> None:
    g = p.add_argument_group("remote targets (a Dask cluster)")
    g.add_argument("--target", action="append", metavar="NAME",
                   help="measure on the cluster worker with resource target-NAME ('local': this machine)"
                        + ("; repeat to compare targets side by side" if many else ""))
    if many:
        g.add_argument("--targets", metavar="A,B", help="comma-separated targets, side by side (e.g. edge,local)")
    g.add_argument("--cluster", metavar="ADDR", help="Dask scheduler tcp://HOST:PORT or tls://... "
                                                     "(default: env ONNX_STUDIO_CLUSTER); it must answer within "
                                                     "ONNX_STUDIO_CLUSTER_TIMEOUT_S seconds (default 20)")
    g.add_argument("--tls-ca-file", help="TLS CA (default: env ONNX_STUDIO_TLS_CA_FILE)")
    g.add_argument("--tls-cert", help="TLS client certificate (default: env ONNX_STUDIO_TLS_CERT)")
    g.add_argument("--tls-key", help="TLS client key (default: env ONNX_STUDIO_TLS_KEY)")


_COMPARISON = re.compile(r"[<>]=?")


def _given(args: argparse.Namespace) -> list[str]:
    raw = args.target if isinstance(args.target, list) else ([args.target] if args.target else [])
    return [t for t in raw if t]


def goal_of(args: argparse.Namespace) -> str | None:
    """``--goal METRIC>=X``, the task-metric goal. The old spelling ``--target METRIC>=X`` still works, with a
    deprecation line: ``--target`` names a machine (target names never hold < or >)."""
    old = [t for t in _given(args) if _COMPARISON.search(t)]
    if old:
        print("note: '--target METRIC>=X' is deprecated: write --goal METRIC>=X (--target names a machine)",
              file=sys.stderr)
    goals = [*([args.goal] if getattr(args, "goal", None) else []), *old]
    if len(goals) > 1:
        raise StudioError("give one task-metric --goal (METRIC>=X)", code=ErrorCode.BAD_OPTION)
    return goals[0] if goals else None


def targets_of(args: argparse.Namespace) -> list[str]:
    """The remote targets asked for, in order, without repeats (empty: run here as before). Where the
    command has a ``--goal``, a ``--target`` with < or > is that goal's old spelling (see :func:`goal_of`)."""
    raw = [t for t in _given(args) if not (hasattr(args, "goal") and _COMPARISON.search(t))]
    raw = [*raw, *(getattr(args, "targets", None) or "").split(",")]
    names = [t.strip() for t in raw if t and t.strip()]
    for t in names:
        if not _TARGET.match(t):
            raise StudioError(f"a target name is letters, digits, '.', '_' or '-' (at most 40), got {t[:40]!r}",
                              code=ErrorCode.BAD_OPTION)
    return list(dict.fromkeys(names))


def tls_of(args: argparse.Namespace) -> tuple[str | None, str | None, str | None]:
    return args.tls_ca_file, args.tls_cert, args.tls_key


def measured_line(m) -> str:  # noqa: ANN001 - studio.batch.remote.Measured
    f = m.measured_by
    engines = ", ".join(f"{k} {v}" for k, v in (f.get("engines") or {}).items() if v)
    where = f"worker {f['worker']}, " if f.get("worker") else ""
    return (f"target   {printable(m.target, 40)}: measured on {printable(str(f.get('host')), 60)} ({where}pid "
            f"{f.get('pid')}), {printable(str(f.get('cpu')), 60)}, {f.get('cores')} cores; {engines}")


def print_side_by_side(measured) -> None:  # noqa: ANN001 - list of Measured

    rows = side_by_side(measured)
    if len(measured) < 2 or not rows:
        return
    names = [m.target for m in measured]
    print("\nside by side (p50 ms; each column measured on its own target)")
    print(f"{'variant':<30} " + " ".join(f"{printable(n, 14):>14}" for n in names))
    for r in rows:
        cells = [r.get(f"p50 ms @{n}") for n in names]
        print(f"{printable(r['variant'] + ' ' + r['label'], 30):<30} "
              + " ".join(f"{'-' if c is None else format(c, '.3f'):>14}" for c in cells))
