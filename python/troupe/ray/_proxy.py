"""Nested Ray API calls from inside workers: the driver listens on a Unix socket in its session
directory (mode 0700, so only this user reaches it; no cluster token goes to any worker) and
serves each worker connection on a thread of its own; a worker's troupe.ray sends each call there
(one connection per thread) and blocks for the answer.

Frames: 8-byte big-endian length + a pickle of (op, args) or ("ok", value) / ("err", exc).
ObjectRefs, actor handles and placement groups cross by id (their __reduce__).
"""

import os
import pickle
import socket
import struct
import threading

from troupe.ray import _context, _serial
from troupe.ray import exceptions as rex

OPS = ("create_actor", "call_actor", "submit_task", "get", "wait", "put", "kill", "get_actor",
       "create_pg", "pg_ready", "remove_pg", "pg_table", "nodes", "cluster_resources",
       "available_resources")


def _send(sock, obj):
    payload, buffers = _serial.dumps(obj)
    if buffers:  # out-of-band buffers are inlined on this path
        payload = pickle.dumps(_serial.loads(payload, buffers), protocol=5)
    sock.sendall(struct.pack(">Q", len(payload)) + payload)


def _recv(sock):
    head = _recv_exact(sock, 8)
    if head is None:
        return None
    return pickle.loads(_recv_exact(sock, struct.unpack(">Q", head)[0]))


def _recv_exact(sock, n):
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class Server:
    """The driver side; `api` is troupe.ray._api.DriverApi (op -> method)."""

    def __init__(self, runtime, path):
        self.runtime = runtime
        self.path = path
        if os.path.exists(path):
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        os.chmod(path, 0o600)
        self._sock.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, name="troupe-ray-proxy", daemon=True).start()

    def _accept(self):
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        from troupe.ray import _api

        api = _api.driver_api()
        with conn:
            while True:
                try:
                    req = _recv(conn)
                except Exception as e:  # noqa: BLE001 - an argument that does not unpickle
                    _send(conn, ("err", rex.RaySystemError(f"bad request: {e!r}")))
                    continue
                if req is None:
                    return
                op, args = req
                try:
                    if op not in OPS:
                        raise rex.RaySystemError(f"unknown op {op!r}")
                    out = ("ok", getattr(api, op)(*args))
                except BaseException as e:  # noqa: BLE001 - sent back to the worker
                    out = ("err", e)
                try:
                    _send(conn, out)
                except Exception as e:  # noqa: BLE001 - a value that does not pickle
                    _send(conn, ("err", rex.RaySystemError(f"cannot send the result: {e!r}")))

    def close(self):
        self._closed = True
        try:
            self._sock.close()
            os.unlink(self.path)
        except OSError:
            pass


class Client:
    """The worker side: every op goes to the driver."""

    def __init__(self, path):
        self.path = path
        self._local = threading.local()

    def _conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if not self.path or not os.path.exists(self.path):
                raise rex.NotSupportedError(
                    "troupe.ray: calling the Ray API from inside a worker needs the driver's "
                    f"control socket ({self.path!r}), which this host cannot reach: nested "
                    "calls work on the driver's machine (its simulated hosts included); pass "
                    "results back to the driver instead")
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(self.path)
            self._local.conn = conn
        return conn

    def request(self, op, *args):
        conn = self._conn()
        _send(conn, (op, args))
        reply = _recv(conn)
        if reply is None:
            raise rex.RaySystemError("the driver closed the control connection")
        status, value = reply
        if status == "err":
            raise value
        return value


_client = None


def client():
    global _client
    if _client is None:
        _client = Client(_context.get("driver_socket"))
    return _client
