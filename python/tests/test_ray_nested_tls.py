"""troupe.ray's TCP port for nested Ray API calls in a cluster with TLS (TROUPE_TLS_DIR): the
connection is TLS 1.3 with certificates of the cluster's CA before the secret handshake, and a
peer without TLS, or with a certificate of another CA, is closed unread. The certificates here
are the user's own (made with the openssl command, as a site CA would), the case where the
directory holds ca.pem and NAME.pem/NAME.key but no ca.key."""

import os
import socket
import ssl
import subprocess
import threading
import time

import pytest

from troupe.ray import _proxy
from troupe.ray import exceptions as rex


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_tls_dir(path, names):
    """A CA (ca.pem) and, signed by it, NAME.pem/NAME.key for each name; ca.key removed."""
    path.mkdir(mode=0o700)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj",
             f"/CN=test CA {path.name}", cwd=path)
    for name in names:
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
                 cwd=path)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", cwd=path)
    os.unlink(path / "ca.key")
    return str(path)


class _Api:
    def nodes(self):
        return ["node-0"]


@pytest.fixture
def tls_server(tmp_path, monkeypatch):
    monkeypatch.setenv("TROUPE_TLS_DIR", _make_tls_dir(tmp_path / "tls", ["driver", "worker"]))
    monkeypatch.setenv("TROUPE_TLS_NAME", "driver")
    server = _proxy.Server(_Api(), str(tmp_path / "api.sock"), tcp_host="127.0.0.1")
    yield server, tmp_path
    server.close()


def _wait_rejected(server, before, timeout=30):
    deadline = time.monotonic() + timeout
    while server.rejected <= before:
        assert time.monotonic() < deadline, "the server never reported closing the peer"
        time.sleep(0.01)


def test_a_worker_of_the_cluster_calls_over_tls(tls_server, monkeypatch):
    server, _ = tls_server
    monkeypatch.setenv("TROUPE_TLS_NAME", "worker")
    client = _proxy.Client(None, server.tcp_address, server.secret.hex())
    assert client.request("nodes") == ["node-0"]
    assert isinstance(client._conn(), ssl.SSLSocket)
    assert client._conn().version() == "TLSv1.3"


def test_a_plaintext_peer_is_closed_unread(tls_server):
    server, _ = tls_server
    host, port = server.tcp_address.rsplit(":", 1)
    before = server.rejected
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(os.urandom(32))  # a plaintext client's nonce
        s.settimeout(10)
        try:
            while s.recv(4096):  # at most a TLS alert, then the close
                pass
        except ConnectionResetError:
            pass
    _wait_rejected(server, before)


def test_a_peer_of_another_ca_is_refused_both_ways(tls_server, tmp_path, monkeypatch):
    server, _ = tls_server
    monkeypatch.setenv("TROUPE_TLS_DIR", _make_tls_dir(tmp_path / "other", ["worker"]))
    monkeypatch.setenv("TROUPE_TLS_NAME", "worker")
    before = server.rejected
    client = _proxy.Client(None, server.tcp_address, server.secret.hex())
    with pytest.raises(ssl.SSLError, match="certificate verify failed"):
        client.request("nodes")
    _wait_rejected(server, before)


def test_a_missing_certificate_is_named(tls_server, monkeypatch):
    server, _ = tls_server
    monkeypatch.setenv("TROUPE_TLS_NAME", "nobody")
    client = _proxy.Client(None, server.tcp_address, server.secret.hex())
    with pytest.raises(rex.RaySystemError, match=r"TLS certificates of .* \(nobody\)"):
        client.request("nodes")


def test_the_secret_handshake_still_runs_inside_tls(tls_server, monkeypatch):
    server, _ = tls_server
    monkeypatch.setenv("TROUPE_TLS_NAME", "worker")
    bad = _proxy.Client(None, server.tcp_address, "00" * 32)
    with pytest.raises(rex.RaySystemError, match="did not prove"):
        bad.request("nodes")
    good = [None]

    def call():
        good[0] = _proxy.Client(None, server.tcp_address, server.secret.hex()).request("nodes")

    t = threading.Thread(target=call)
    t.start()
    t.join(30)
    assert good[0] == ["node-0"]
