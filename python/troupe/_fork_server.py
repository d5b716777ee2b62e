"""The Python fork server: forks Python workers from an interpreter that imported troupe's worker
runtime and a preload set once (agent/fork_server_choice.h on the agent's side).

An agent starts it as it would start a worker of that class -- the same interpreter, the same
bootstrap (``python -c CODE``, which runs troupe._role) -- with TROUPE_ROLE=forkserver,
TROUPE_FORK_SERVER_FD (its socket to the agent) and TROUPE_PYTHON_PRELOAD (the modules to
import). It speaks the agent's fork-server protocol (src/agent/fork_server_protocol.h): a
greeting, then per worker a header with the worker's descriptors attached, its cwd and
environment, answered with the worker's pid (the loop is _core.serve_fork_requests, so that no
Python code runs in this process between forks). Each worker is forked by an intermediate child
made with vfork (_core.fork_past_intermediate, python/src/sibling_fork.h), which puts it in its
own process group and exits; the agent, a child subreaper, becomes its parent (FS-3 of
src/agent/fork_server.h).

Invariants: PFS-1 and PFS-2 in src/agent/fork_server_choice.h.
"""

import ctypes
import gc
import importlib
import os
import signal
import socket
import struct
import sys
import threading

# Its invariants, PFS-1 (safe fork only) and PFS-2 (same worker as exec), are stated in
# src/agent/fork_server_choice.h.

import troupe._worker  # noqa: F401  troupe's worker runtime, preloaded for every worker
from troupe import _core

_HELLO_OK, _HELLO_THREADS, _HELLO_BAD_SETUP = 0, 1, 2
_MARKER_ROOM = 40
_INT = struct.Struct("=i")

forked = False  # True in a worker forked by this module

_libc = ctypes.CDLL(None, use_errno=True)


def _unsafe():
    """Why forking now is unsafe (PFS-1), or None."""
    tasks = len(os.listdir("/proc/self/task"))
    if threading.active_count() != 1 or tasks != 1:
        names = [t.name for t in threading.enumerate()]
        return f"{tasks} threads run (Python threads: {names})"
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return "CUDA is initialised"
        except AttributeError:
            pass
    return None


def _open_fds():
    """This process's open descriptors (not the one that listed them, closed by then)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            os.readlink(f"/proc/self/fd/{fd}")
            out.add(int(fd))
        except OSError:
            pass
    return out


def _preload(names):
    """Imports `names` in order; (hello, message) that says whether it may serve."""
    fds = _open_fds()
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001 -- whatever the import raised
            return _HELLO_BAD_SETUP, f"preloading module '{name}' failed: {type(e).__name__}: {e}"
        # A worker closes every descriptor but 0-4; one that a module keeps open (a Python
        # object would close its number again, by then another file's) makes it unsafe.
        opened = _open_fds() - fds
        why = f"it left descriptors {sorted(opened)} open" if opened else _unsafe()
        if why:
            code = _HELLO_THREADS if "thread" in why else _HELLO_BAD_SETUP
            return code, (f"preloading module '{name}' made forking unsafe ({why}); "
                          "remove it from python_preload / TROUPE_PYTHON_PRELOAD")
    why = _unsafe()
    if why:
        return _HELLO_THREADS, f"the fork server is not safe to fork ({why})"
    return _HELLO_OK, ""


def _marker_address():
    """The address of the value of TROUPE_CONTAINER in the environment block this process was
    exec'd with (the agent's placeholder, src/agent/containment.h), or None."""
    key = b"TROUPE_CONTAINER="
    env = ctypes.POINTER(ctypes.c_void_p).in_dll(_libc, "environ")
    i = 0
    while env[i]:
        entry = ctypes.string_at(env[i])
        if entry.startswith(key) and len(entry) == len(key) + _MARKER_ROOM:
            return env[i] + len(key)
        i += 1
    return None


class _Server:
    def __init__(self, sock, agent):
        self.sock = sock
        self.agent = agent
        # What an exec'd worker has at this point of troupe._role.main (PFS-2).
        self.path = list(sys.path)
        self.argv = list(sys.argv)
        self.handlers = {}
        for sig in signal.valid_signals():
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                try:
                    handler = signal.getsignal(sig)
                except (OSError, ValueError):
                    continue
                if handler is not None:
                    self.handlers[sig] = handler
        self.marker = _marker_address()
        self.changed_handlers = []

    def note_changed_handlers(self):
        """After the preload: the handlers it changed, which each worker sets back."""
        self.changed_handlers = [(sig, handler) for sig, handler in self.handlers.items()
                                 if signal.getsignal(sig) != handler]

    def become_worker(self, intermediate, umask, cwd, env, fds):
        """In the forked worker: the start an exec'd worker has (PFS-2, FS-2, FS-3). Exits on
        failure."""
        global forked
        forked = True
        try:
            self._become_worker(intermediate, umask, cwd, env, fds)
        except BaseException as e:  # noqa: BLE001
            os.write(2, f"troupe fork server: worker set-up failed: {e!r}\n".encode())
            os._exit(127)

    def _become_worker(self, intermediate, umask, cwd, env, fds):
        self.sock.detach()  # its descriptor is closed below with the others
        _core.become_forked_worker(self.agent, intermediate, fds, umask, cwd, env,
                                   self.marker or 0, _MARKER_ROOM)
        for sig, handler in self.changed_handlers:
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        data = os.environ._data  # noqa: SLF001 -- os.environ's bytes mapping (shared with environb)
        data.clear()
        for entry in env:
            key, _, value = entry.partition(b"=")
            data[key] = value
        sys.path[:] = self.path
        sys.argv[:] = self.argv
        if not sys.stdout.write_through:  # buffered as the interpreter sets up a pipe
            sys.stdout.reconfigure(line_buffering=False)
        self.reseed()

    @staticmethod
    def reseed():
        """Random state of its own, as an exec'd worker's (the random module reseeds itself at
        fork: fork_past_intermediate runs the interpreter's after-fork hooks)."""
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None:
            # NumPy's global MT19937 from 624 words of OS entropy, as seed() would make it from
            # its own, through a far shorter path (half the pages written: each costs a copy).
            numpy = sys.modules["numpy"]
            words = numpy.frombuffer(os.urandom(624 * 4), dtype=numpy.uint32)
            numpy_random.set_state(("MT19937", words, 624, 0, 0.0))
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "default_generator"):
            torch.default_generator.manual_seed(torch.default_generator.initial_seed())


def serve():
    """Runs the fork server until the agent closes its socket (then exits the process). Returns
    only in a forked worker, set up as PFS-2 says."""
    fd = int(os.environ["TROUPE_FORK_SERVER_FD"])
    os.set_inheritable(fd, False)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
    server = _Server(sock, os.getppid())
    names = [n for n in os.environ.get("TROUPE_PYTHON_PRELOAD", "").split(",") if n]
    _core.warm_up_for_forks()
    hello, message = _preload(names)
    try:
        sock.sendall(_INT.pack(hello))
        if hello != _HELLO_OK:
            sock.sendall(message.encode("utf-8", "replace")[:4096])
    except OSError:
        os._exit(0)
    if hello != _HELLO_OK:
        os._exit(1)
    server.note_changed_handlers()
    # Everything imported so far is permanent: a worker's collections never walk (and so never
    # write, copying their pages) the objects it shares with this process.
    gc.freeze()
    sys.stdout.flush()  # no Python code runs in this process from here on but in its workers
    sys.stderr.flush()
    umask, cwd, env, fds, intermediate = _core.serve_fork_requests(sock.fileno())
    server.become_worker(intermediate, umask, cwd, env, fds)
