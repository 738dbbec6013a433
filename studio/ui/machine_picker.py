"""Where a page's run goes: this machine or a remote target (a cluster worker started with ``--target NAME``).

One picker for every page that can run remotely (Profile, Optimize): the names come from the configured
cluster (``ONNX_STUDIO_CLUSTER`` / ``serve --cluster``), never from a model or an upload. A remote target is
a machine, not a metric goal (that one is ``task_picker.target_picker``)."""

from __future__ import annotations

import streamlit as st

from studio.batch import facade as batch_api
from studio.ui import widgets


def machine_picker(key: str, label: str) -> str | None:
    """The remote target chosen under ``key`` (None: this machine); shown only with a cluster configured."""
    cluster = widgets.guarded(batch_api.configured_cluster)
    if not cluster:
        return None
    names = widgets.guarded(lambda: batch_api.cluster_targets(cluster)) or []
    choice = st.selectbox(label, [batch_api.LOCAL, *names], key=key,
                          help="a remote target is a cluster worker started with --target NAME")
    return None if choice == batch_api.LOCAL else choice


def measured_line(measured) -> str:  # noqa: ANN001 - studio.batch.remote.Measured
    """"<verb> on target NAME: host (worker, pid), cpu, cores": which machine a remote result came from."""
    f = measured.measured_by
    return (f"on target {measured.target}: {f.get('host')} (worker {f.get('worker')}, pid {f.get('pid')}), "
            f"{f.get('cpu')}, {f.get('cores')} cores")
