"""onnxsim and onnxslim run on a model file in a sandbox worker: their node counts beside ours.

Used by ``optimize --compare-peers`` (through ``studio.api.compare_peers``) and by
the optimizer-strength benchmark. Each peer runs in its own fresh worker with a
timeout and a memory limit: onnxsim can die with SIGFPE or hang, and that ends as
``PeerResult.error`` for that peer, never as a dead studio. The peers' results are
only counted here; whether they are correct is for the caller to judge (the
benchmark runs them on ONNX Runtime; the optimize pipeline verifies its own).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from passes.onnxsim_pass import run_tool
from studio.core.errors import WorkerError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import default_limits, run_job
from studio.core.save import save_model

PEERS = ("onnxsim", "onnxslim")


@dataclass(frozen=True)
class PeerResult:
    """What one peer made of the model: top-level nodes, all nodes (subgraphs included), file size."""

    tool: str
    ok: bool
    nodes: int | None = None          # top-level graph nodes
    all_nodes: int | None = None      # including If/Loop/Scan bodies
    size_bytes: int | None = None     # serialized model (weights included)
    seconds: float = 0.0
    path: str | None = None           # the peer's result, when ``out_dir`` was given
    error: str = ""

    def to_dict(self) -> dict:
        return {"tool": self.tool, "ok": self.ok, "nodes": self.nodes, "all_nodes": self.all_nodes,
                "size_bytes": self.size_bytes, "seconds": round(self.seconds, 3), "path": self.path,
                "error": self.error}


def count_all_nodes(graph) -> int:
    """Nodes of an ``onnx.GraphProto`` and of every subgraph in its attributes."""
    total = 0
    for node in graph.node:
        total += 1
        for attr in node.attribute:
            if attr.g is not None and attr.HasField("g"):
                total += count_all_nodes(attr.g)
            for g in attr.graphs:
                total += count_all_nodes(g)
    return total


@job("peers.simplify")
def peers_simplify_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    """Run one peer on ``args['src']``; write its result to ``args['out']`` when given."""
    import onnx

    tool, src = args["tool"], args["src"]
    ctx.set_stage(f"{tool} on the model")
    model = onnx.load(src)
    t = time.perf_counter()
    if tool not in PEERS:
        raise ValueError(f"unknown peer '{tool}'; peers: {', '.join(PEERS)}")
    out = run_tool(tool, model)     # the same call as the verified passes (T8: onnxslim without shape inference)
    seconds = time.perf_counter() - t
    data = {"nodes": len(out.graph.node), "all_nodes": count_all_nodes(out.graph),
            "size_bytes": out.ByteSize(), "seconds": seconds}
    if args.get("out"):
        save_model(out, Path(args["out"]))
    return JobOutput(data=data)


def run_peer(tool: str, src: str | Path, out: str | Path | None = None, *, timeout_s: float = 300.0,
             pool_key: str = "peers") -> PeerResult:
    """One peer on one model file, in a fresh sandbox worker; any failure is ``error``, one line."""
    if tool not in PEERS:
        return PeerResult(tool, False, error=f"unknown peer '{tool}'; peers: {', '.join(PEERS)}")
    try:
        __import__(tool)
    except Exception as exc:    # ImportError, or a broken native extension
        return PeerResult(tool, False, error=f"{tool} is not available here ({type(exc).__name__})")
    limits = replace(default_limits(), timeout_s=float(timeout_s))
    t = time.perf_counter()
    try:
        res = run_job("peers.simplify", {"tool": tool, "src": str(Path(src).resolve()),
                                         "out": str(Path(out).resolve()) if out else ""},
                      stage=f"{tool} (peer)", limits=limits, fresh=True, pool_key=pool_key)
    except WorkerError as exc:
        return PeerResult(tool, False, seconds=time.perf_counter() - t, error=str(exc).splitlines()[0][:300])
    d = res.data
    return PeerResult(tool, True, int(d["nodes"]), int(d["all_nodes"]), int(d["size_bytes"]), float(d["seconds"]),
                      str(out) if out else None)


def compare_peers(src: str | Path, out_dir: str | Path | None = None, *, timeout_s: float = 300.0,
                  tools: tuple[str, ...] = PEERS) -> tuple[PeerResult, ...]:
    """Every peer on ``src``; with ``out_dir`` their results are kept as OUT_DIR/<tool>.onnx."""
    return tuple(run_peer(t, src, Path(out_dir) / f"{t}.onnx" if out_dir else None, timeout_s=timeout_s)
                 for t in tools)
