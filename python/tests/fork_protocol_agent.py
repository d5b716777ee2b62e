"""Plays an agent to one Python fork server (python/troupe/_fork_server.py) over the fork-server
protocol (src/agent/fork_server_protocol.h), for test_fork_server.py: run as
``python fork_protocol_agent.py KIND``, prints one JSON object of what it saw.

It is a child subreaper, as an agent is, so that the workers the fork server forks become its
children. KIND is the second request it sends, after a valid one:
- "valid": another valid request;
- "bad_magic": a header whose magic is wrong;
- "truncated_string": a body whose last string claims more bytes than the body holds;
- "missing_fds": a valid header and body with three descriptors instead of four.
"""

import ctypes
import json
import os
import socket
import struct
import subprocess
import sys

MAGIC = 0x32534654
HEADER = struct.Struct("=IIII")  # magic, umask, body_len, nfds
PR_SET_CHILD_SUBREAPER = 36


def strings(*items):
    return b"".join(struct.pack("=I", len(s)) + s for s in items)


def send(sock, header, body, fds, may_be_refused):
    """Sends one request. A fork server that refuses a malformed header closes the socket at
    once, so the body can meet a closed socket then (only if `may_be_refused`)."""
    rights = struct.pack(f"={len(fds)}i", *fds)
    sock.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
    try:
        sock.sendall(body)
    except (BrokenPipeError, ConnectionResetError):
        if not may_be_refused:
            raise


def worker_request(sock, kind):
    """Sends one request; returns the read ends of the worker's stdout and stderr pipes."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ready_r, ready_w = os.pipe()
    token_r, token_w = os.pipe()
    # TROUPE_ROLE "none": troupe._role says it is not set to agent or worker, and exits 2.
    body = strings(b"/", b"TROUPE_ROLE=none", b"PATH=/usr/bin:/bin", b"MARK=" + kind.encode())
    magic, nfds = MAGIC, 4
    fds = [out_w, err_w, ready_w, token_r]
    if kind == "bad_magic":
        magic = 0x12345678
    elif kind == "truncated_string":
        body = body + struct.pack("=I", 1000) + b"short"
    elif kind == "missing_fds":
        fds = fds[:3]
    send(sock, HEADER.pack(magic, 0o022, len(body), nfds), body, fds, kind != "valid")
    for fd in (out_w, err_w, ready_w, token_r, ready_r, token_w):
        os.close(fd)
    return out_r, err_r


def read_all(fd):
    data = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            os.close(fd)
            return data.decode("utf-8", "replace")
        data += chunk


def answer(sock):
    """The int32 answer, or None at EOF (a reset: it closed with our request unread)."""
    data = b""
    while len(data) < 4:
        try:
            chunk = sock.recv(4 - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return struct.unpack("=i", data)[0]


def reap_worker(pid, out_r, err_r):
    stderr = read_all(err_r)
    read_all(out_r)
    _, status = os.waitpid(pid, 0)
    return {"pid": pid, "exit": os.waitstatus_to_exitcode(status), "stderr": stderr}


def main():
    kind = sys.argv[1]
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    env = dict(os.environ, TROUPE_ROLE="forkserver", TROUPE_FORK_SERVER_FD=str(theirs.fileno()),
               TROUPE_PYTHON_PRELOAD="")
    server = subprocess.Popen([sys.executable, "-m", "troupe._role"], env=env,
                              pass_fds=[theirs.fileno()])
    theirs.close()
    report = {"hello": answer(ours)}
    out_r, err_r = worker_request(ours, "valid")
    pid = answer(ours)
    report["first"] = reap_worker(pid, out_r, err_r) if pid and pid > 0 else {"pid": pid}
    out_r, err_r = worker_request(ours, kind)
    pid = answer(ours)
    if pid is not None and pid > 0:
        report["second"] = reap_worker(pid, out_r, err_r)
        ours.close()  # the agent is done: the fork server exits
    else:
        report["second"] = {"pid": pid, "stderr": read_all(err_r)}  # EOF: nobody holds the pipe
        read_all(out_r)
    report["server_exit"] = server.wait(timeout=30)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
