"""``profile --generate --target NAME``: a decoder's generation profile measured on the Dask worker offering
target-NAME (its pid comes back with the figures), side by side with this machine."""

from __future__ import annotations

import json
import os

import pytest

from sample_models.catalog import path_of
from studio import api
from studio.batch import facade as batch_api
from studio.cli import main
from studio.core.requests import GenerationRequest


@pytest.mark.slow
def test_generation_on_a_target_runs_there(dask_cluster, capsys):
    from distributed import Client

    with Client(dask_cluster.address, timeout=30, set_as_default=False) as c:
        workers = c.scheduler_info(n_workers=-1)["workers"]
        (edge_addr,) = [a for a, w in workers.items() if "target-edge" in (w.get("resources") or {})]
        edge_pid = c.run(os.getpid, workers=[edge_addr])[edge_addr]
    request = GenerationRequest(prompt_lengths=(4,), new_tokens=3, generations=1, memory=False)
    on_edge, here = batch_api.generate_on(["edge", "local"], [api.load(path_of("llama_optimum"))], request,
                                          cluster=dask_cluster.address)
    assert on_edge.request == here.request == request     # the request each far end rebuilt and ran
    assert on_edge.measured_by["pid"] == edge_pid != os.getpid() and here.measured_by["pid"] == os.getpid()
    assert on_edge.result.ok and here.result.ok
    # the same seeded prompt and greedy loop on both machines: the same tokens
    assert on_edge.result.variants[0].cases[0].tokens == here.result.variants[0].cases[0].tokens

    assert main(["profile", str(path_of("llama_optimum")), "--generate", "--target", "edge", "--cluster",
                 dask_cluster.address, "--prompt-lengths", "4", "--new-tokens", "3", "--generations", "1",
                 "--no-generation-memory", "--json"]) == 0
    (measured,) = json.loads(capsys.readouterr().out)["targets"]
    assert measured["target"] == "edge" and measured["measured_by"]["pid"] == edge_pid
    assert measured["result"]["kind"] == "generation" and measured["result"]["variants"][0]["cases"][0]["ok"]
