"""Nested Ray API calls from a worker that cannot use the driver's Unix socket (a worker on
another host; here forced with TROUPE_RAY_API=tcp): they go over the driver's TCP port, which
admits only peers that prove the driver's secret (troupe.ray._proxy) and unpickles nothing
before that."""

import os
import pickle
import socket
import struct
import threading
import time

import pytest

from troupe import ray
from troupe.ray import _current, _proxy
from troupe.ray import exceptions as rex

import ray_workers as w


@pytest.fixture(scope="module")
def cluster():
    ray.init(_num_nodes=2, num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def _server():
    return _current.runtime().server


def _wait_rejected(before, timeout=30):
    deadline = time.monotonic() + timeout
    while _server().rejected <= before:
        assert time.monotonic() < deadline, "the server never reported closing the peer"
        time.sleep(0.01)


class _Planted:
    """Unpickling this would create `path`."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_nested_calls_over_tcp(cluster):
    for node in (0, 1):
        a = w.ApiPath.options(
            runtime_env={"env_vars": {"TROUPE_RAY_API": "tcp"}},
            scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                ray.nodes()[node]["NodeID"], soft=False)).remote()
        assert tuple(ray.get(a.nested.remote(41), timeout=60)) == (42, True)
        ray.kill(a)


def test_peers_without_the_secret_are_closed_unread(cluster, tmp_path):
    host, port = _server().tcp_address.rsplit(":", 1)
    planted = tmp_path / "planted"
    frame = pickle.dumps(("get", (_Planted(str(planted)),)))
    # A peer that sends a request frame at once: its first 32 bytes are taken as its nonce, the
    # rest as a wrong proof; it is closed and nothing is unpickled.
    before = _server().rejected
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">Q", len(frame)) + frame + b"\0" * 64)
        s.settimeout(10)
        try:  # the server's nonce and proof, then the close (a reset: our bytes were unread)
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
    _wait_rejected(before)
    assert not planted.exists()
    # A peer with a wrong secret cannot prove itself either.
    before = _server().rejected
    bad = _proxy.Client(None, _server().tcp_address, "00" * 32)
    with pytest.raises(rex.RaySystemError, match="did not prove"):
        bad.request("nodes")
    # The server still serves its workers.
    a = w.ApiPath.options(runtime_env={"env_vars": {"TROUPE_RAY_API": "tcp"}}).remote()
    assert tuple(ray.get(a.nested.remote(1), timeout=60)) == (2, True)
    ray.kill(a)


def test_a_silent_peer_is_closed_after_the_handshake_deadline(cluster):
    host, port = _server().tcp_address.rsplit(":", 1)
    before = _server().rejected
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.settimeout(30)
        assert s.recv(1) == b""  # closed by the server (5 s handshake deadline)
    _wait_rejected(before)


def test_a_worker_refuses_a_server_that_cannot_prove_the_secret(cluster):
    with socket.socket() as fake:
        fake.bind(("127.0.0.1", 0))
        fake.listen(1)
        address = f"127.0.0.1:{fake.getsockname()[1]}"
        client = _proxy.Client(None, address, os.urandom(32).hex())

        def answer():
            conn, _ = fake.accept()
            with conn:
                conn.recv(32)
                conn.sendall(os.urandom(64))
                conn.recv(32)

        t = threading.Thread(target=answer)
        t.start()
        with pytest.raises(rex.RaySystemError, match="did not prove it is this job's driver"):
            client.request("nodes")
        t.join()


def _request(conn, op, *args):
    _proxy._send(conn, (op, args, []))
    return _proxy._recv(conn)


def test_malformed_frames_get_an_error_or_a_close_and_lose_nothing(cluster):
    ref = ray.put(b"kept")
    path = _server().path
    # A well-formed frame whose pickle does not load: an error reply, the connection serves on.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        junk = b"\x80\x05junk"
        conn.sendall(struct.pack(">QI", len(junk), 0) + junk)
        status, err = _proxy._recv(conn)
        assert status == "err" and "bad request" in str(err)
        status, value = _request(conn, "cluster_resources")
        assert status == "ok" and value["CPU"] == 4.0  # 2 nodes of 2 CPUs
        # An unknown op: named in the error.
        status, err = _request(conn, "frobnicate")
        assert status == "err" and "frobnicate" in str(err)
    # A header claiming more buffers than any frame may carry: that connection is closed.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(struct.pack(">QI", 0, 0xFFFFFFFF))
        conn.settimeout(30)
        assert conn.recv(1) == b""  # closed, nothing sent
    # The driver lost nothing: its objects and other connections are served as before.
    assert ray.get(ref) == b"kept"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        status, value = _request(conn, "put", b"fresh")
        assert status == "ok"
