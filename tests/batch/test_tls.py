"""TLS passes through: a tls:// loopback cluster (scheduler, a studio worker with --tls-*) is
reached with the studio's TLS settings (flags or ONNX_STUDIO_TLS_*), and refused without them."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from sample_models.catalog import path_of
from studio import api
from studio.batch import facade as batch_api
from studio.batch.executors import ClusterSecurity
from studio.core.errors import StudioError
from tests.conftest import assert_user_message
from tests.requirements import require_module


def _certificate(folder):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return str(cert), str(cert), str(key)


def test_tls_settings_come_from_flags_or_configuration(monkeypatch):
    monkeypatch.setenv("ONNX_STUDIO_TLS_CA_FILE", "ca.pem")
    monkeypatch.setenv("ONNX_STUDIO_TLS_CERT", "c.pem")
    monkeypatch.setenv("ONNX_STUDIO_TLS_KEY", "k.pem")
    assert ClusterSecurity.from_env() == ClusterSecurity("ca.pem", "c.pem", "k.pem")
    assert ClusterSecurity.from_env("other.pem").ca_file == "other.pem"
    monkeypatch.delenv("ONNX_STUDIO_TLS_CA_FILE")
    monkeypatch.delenv("ONNX_STUDIO_TLS_CERT")
    assert ClusterSecurity.from_env().to_dask() is None


@pytest.mark.slow
def test_a_tls_cluster_runs_a_target_profile_only_with_the_certificates(tmp_path, monkeypatch):
    require_module("distributed")
    from studio.core.requests import ProfileRequest
    from studio.batch.loopback import LoopbackCluster

    tls = _certificate(tmp_path)
    with LoopbackCluster(tmp_path / "cluster", {"edge": "edge"}, tls=tls) as cluster:
        assert cluster.address.startswith("tls://127.0.0.1:")
        assert batch_api.cluster_targets(cluster.address, tls=tls) == ["edge"]
        with pytest.raises(StudioError) as refused:            # plain client, tls:// scheduler
            batch_api.cluster_targets(cluster.address)
        assert_user_message(str(refused.value), "cannot reach the dask scheduler")
        monkeypatch.setenv("ONNX_STUDIO_TLS_CA_FILE", tls[0])
        monkeypatch.setenv("ONNX_STUDIO_TLS_CERT", tls[1])
        monkeypatch.setenv("ONNX_STUDIO_TLS_KEY", tls[2])
        (m,) = batch_api.profile_on(["edge"], [api.load(path_of("cnn_unfused"))],
                                    ProfileRequest.of(iterations=5, rounds=2, warmup=1), cluster=cluster.address)
        assert m.result.ok and m.measured_by["target"] == "edge" and m.measured_by["worker"].startswith("tls://")
