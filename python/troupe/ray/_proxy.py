"""Nested Ray API calls from inside workers: the driver serves them on a Unix socket in its
session directory (mode 0600 in a 0700 directory, so only this user reaches it) and on a TCP
port of the address its hosts reach it on, for workers on other hosts. Each worker connection is
served on a thread of its own; a worker's troupe.ray sends each call there (one connection per
thread) and blocks for the answer. No cluster token goes to any worker: a TCP connection is
authenticated both ways with a secret of this driver's (32 random bytes, given to its workers in
their start-up context, never in their environment) before anything is unpickled:

  client -> server  32-byte client nonce
  server -> client  32-byte server nonce + HMAC-SHA256(secret, "server" + both nonces)
  client -> server  HMAC-SHA256(secret, "client" + both nonces)

A peer that fails or stalls (5 s) is closed without a byte of its unpickled; at most 64
handshakes run at once (more are closed at once). In a cluster with TLS (TROUPE_TLS_DIR, set by
the agent for its workers) the TCP connection is TLS 1.3 first, both ends presenting a
certificate of the cluster's CA (as troupe's own connections, transport/tls.h), and the
handshake above runs inside it.

Frames: a header (8-byte big-endian pickle length, 4-byte buffer count, 8 bytes per buffer
length), then a pickle (protocol 5) of (op, args, released) or ("ok", value) / ("err", exc),
then its out-of-band buffers, unpickled in place (large arrays are not copied into the pickle).
ObjectRefs, actor handles and placement groups cross by id (their __reduce__).
`released`: the keys of leased refs this worker dropped since its last request (the refs that
put, submit_task and call_actor made for it are leased: troupe.ray._objects.leasing). A wait
is answered with the indices of the ready refs, so the worker keeps its own ref objects.
"""

import errno
import hashlib
import hmac
import os
import secrets
import socket
import ssl
import struct
import threading

from troupe.ray import _context, _objects, _serial
from troupe.ray import exceptions as rex

OPS = ("create_actor", "call_actor", "submit_task", "get", "wait", "put", "kill", "get_actor",
       "create_pg", "pg_ready", "remove_pg", "pg_table", "nodes", "cluster_resources",
       "available_resources", "generator_next", "actor_info", "list_actor_infos",
       "available_resources_per_node", "cancel")
# The ops whose reply carries refs made for the asking worker (leased to it).
_LEASING_OPS = ("put", "submit_task", "call_actor")


_MAX_BUFFERS = 1 << 16


def tls_context(server):
    """The TLS context of this process's TCP connections: TROUPE_TLS_DIR's ca.pem and the
    certificate NAME.pem/NAME.key (NAME: TROUPE_TLS_NAME, else the host name); None without
    TLS."""
    directory = os.environ.get("TROUPE_TLS_DIR")
    if not directory:
        return None
    name = os.environ.get("TROUPE_TLS_NAME") or socket.gethostname()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        ctx.load_verify_locations(os.path.join(directory, "ca.pem"))
        ctx.load_cert_chain(os.path.join(directory, name + ".pem"),
                            os.path.join(directory, name + ".key"))
    except (OSError, ssl.SSLError) as e:
        raise rex.RaySystemError(
            f"troupe.ray: cannot load the TLS certificates of {directory} ({name}): {e}") from e
    ctx.check_hostname = False  # peers prove the cluster's CA, then its secret (as troupe does)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class FrameError(ConnectionError):
    """A frame that cannot be read (its header claims too much): the connection is closed."""


def _send(sock, obj):
    """One frame: (payload length, buffer count, each buffer's length) big-endian, the pickle,
    then its out-of-band buffers as they are (a NumPy array is sent from its own memory)."""
    payload, buffers = _serial.dumps(obj)
    views = [memoryview(b).cast("B") for b in buffers]
    sock.sendall(struct.pack(f">QI{len(views)}Q", len(payload), len(views),
                             *(v.nbytes for v in views)) + payload)
    for view in views:
        sock.sendall(view)


def _recv(sock):
    """The value of the next frame; None at the end of the stream. Raises FrameError for a
    header that claims too many buffers; a value that does not unpickle raises only once the
    whole frame was read (the connection stays usable)."""
    head = _recv_exact(sock, 12)
    if head is None:
        return None
    size, count = struct.unpack(">QI", head)
    if count > _MAX_BUFFERS:
        raise FrameError(f"a frame of {count} buffers (at most {_MAX_BUFFERS})")
    sizes = struct.unpack(f">{count}Q", _recv_exact(sock, 8 * count) or b"") if count else ()
    payload = _recv_exact(sock, size)
    buffers = [_recv_exact(sock, n) for n in sizes]
    if payload is None or any(b is None for b in buffers):
        return None
    return _serial.loads(payload, buffers)


def _recv_exact(sock, n):
    """`n` bytes (a bytearray, read straight into it), or None at the end of the stream."""
    out = bytearray(n)
    view, got = memoryview(out), 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 24))
        if not k:
            return None
        got += k
    return out


_NONCE = 32
_HANDSHAKE_TIMEOUT = 5.0
_MAX_HANDSHAKES = 64


def _mac(secret, role, client_nonce, server_nonce):
    return hmac.new(secret, role + client_nonce + server_nonce, hashlib.sha256).digest()


class Server:
    """The driver side; `api` serves the ops (troupe.ray._api.DriverApi: op -> method).
    `tcp_host`: the address workers on other hosts reach this driver on (None: Unix socket
    only)."""

    def __init__(self, api, path, tcp_host=None):
        self.api = api
        self.path = path
        self.secret = secrets.token_bytes(32)
        self.tcp_address = None
        self.rejected = 0  # TCP peers closed in the handshake (bad proof, stall, over the cap)
        if os.path.exists(path):
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        os.chmod(path, 0o600)
        self._sock.listen(64)
        self._closed = False
        self._handshakes = threading.BoundedSemaphore(_MAX_HANDSHAKES)
        threading.Thread(target=self._accept, args=(self._sock, False), name="troupe-ray-proxy",
                         daemon=True).start()
        self._tcp = None
        self._tls = tls_context(server=True) if tcp_host else None
        if tcp_host:
            self._tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._tcp.bind((tcp_host, 0))
            self._tcp.listen(64)
            self.tcp_address = f"{tcp_host}:{self._tcp.getsockname()[1]}"
            threading.Thread(target=self._accept, args=(self._tcp, True),
                             name="troupe-ray-proxy-tcp", daemon=True).start()

    def _accept(self, listener, tcp):
        while not self._closed:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if tcp and not self._handshakes.acquire(blocking=False):
                self.rejected += 1
                conn.close()
                continue
            target = self._serve_tcp if tcp else self._serve
            threading.Thread(target=target, args=(conn,), daemon=True).start()

    def _serve_tcp(self, conn):
        try:
            if self._tls is not None:
                conn = self._wrap(conn)
            ok = conn is not None and self._handshake(conn)
        finally:
            self._handshakes.release()
        if not ok:
            self.rejected += 1
            if conn is not None:
                conn.close()
            return
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._serve(conn)

    def _wrap(self, conn):
        """The TLS server side on an accepted connection; None (closed) when it fails."""
        try:
            conn.settimeout(_HANDSHAKE_TIMEOUT)
            return self._tls.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()
            return None

    def _handshake(self, conn):
        """Mutual proof of the secret; True when the peer is one of this driver's workers."""
        try:
            conn.settimeout(_HANDSHAKE_TIMEOUT)
            client_nonce = _recv_exact(conn, _NONCE)
            if client_nonce is None:
                return False
            server_nonce = secrets.token_bytes(_NONCE)
            conn.sendall(server_nonce + _mac(self.secret, b"server", client_nonce, server_nonce))
            proof = _recv_exact(conn, 32)
            return proof is not None and hmac.compare_digest(
                proof, _mac(self.secret, b"client", client_nonce, server_nonce))
        except OSError:
            return False

    def _serve(self, conn):
        api = self.api
        with conn:
            while True:
                try:
                    req = _recv(conn)
                except (FrameError, OSError):
                    return
                except Exception as e:  # noqa: BLE001 - an argument that does not unpickle
                    _send(conn, ("err", rex.RaySystemError(f"bad request: {e!r}")))
                    continue
                if req is None:
                    return
                op = None
                try:
                    op, args, released = req
                    if released:
                        _objects.release_leases(released)
                    if op not in OPS:
                        raise rex.RaySystemError(f"unknown op {op!r}")
                    if op == "wait":
                        ready = {id(r) for r in api.wait(*args)[0]}
                        out = ("ok", [i for i, r in enumerate(args[0]) if id(r) in ready])
                    else:
                        out = ("ok", getattr(api, op)(*args))
                except BaseException as e:  # noqa: BLE001 - sent back to the worker
                    out = ("err", e)
                try:
                    if op in _LEASING_OPS and out[0] == "ok":
                        with _objects.leasing():
                            _send(conn, out)
                    else:
                        _send(conn, out)
                except Exception as e:  # noqa: BLE001 - a value that does not pickle
                    _send(conn, ("err", rex.RaySystemError(f"cannot send the result: {e!r}")))

    def close(self):
        self._closed = True
        for listener in (self._tcp, self._sock):
            if listener is not None:
                try:
                    listener.close()
                except OSError:
                    pass
        try:
            os.unlink(self.path)
        except OSError:
            pass


class Client:
    """The worker side: every op goes to the driver, over its Unix socket when this host has it
    (the driver's machine), else (or with TROUPE_RAY_API=tcp) over TCP with the handshake."""

    def __init__(self, path, tcp_address=None, secret=None):
        self.path = path
        self.tcp_address = tcp_address
        self.secret = bytes.fromhex(secret) if secret else None
        self._local = threading.local()

    def _conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _connect(self):
        if os.environ.get("TROUPE_RAY_API") != "tcp" and self.path and os.path.exists(self.path):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.path)
                return conn
            except OSError as e:  # a shared file system's socket file of another machine
                conn.close()
                if e.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                    raise
        if not self.tcp_address or not self.secret:
            raise rex.NotSupportedError(
                "troupe.ray: calling the Ray API from inside a worker needs the driver's "
                f"control socket ({self.path!r}), which this host cannot reach, and the driver "
                "gave no TCP address")
        host, port = self.tcp_address.rsplit(":", 1)
        conn = socket.create_connection((host, int(port)), timeout=_HANDSHAKE_TIMEOUT)
        try:
            tls = tls_context(server=False)
            if tls is not None:
                conn = tls.wrap_socket(conn)
            client_nonce = secrets.token_bytes(_NONCE)
            conn.sendall(client_nonce)
            reply = _recv_exact(conn, _NONCE + 32)
            if reply is None or not hmac.compare_digest(
                    reply[_NONCE:], _mac(self.secret, b"server", client_nonce, reply[:_NONCE])):
                raise rex.RaySystemError(
                    f"troupe.ray: {self.tcp_address} did not prove it is this job's driver")
            conn.sendall(_mac(self.secret, b"client", client_nonce, reply[:_NONCE]))
        except BaseException:
            conn.close()
            raise
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def request(self, op, *args):
        conn = self._conn()
        released = []
        try:
            while True:
                released.append(_context.released_leases.popleft())
        except IndexError:  # drained (other threads drain it too)
            pass
        with _context.sending_to_driver():
            _send(conn, (op, args, released))
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
        _client = Client(_context.get("driver_socket"), _context.get("driver_tcp"),
                         _context.get("driver_secret"))
    return _client
