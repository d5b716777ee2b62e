"""Worker classes of test_fork_server.py: a probe of everything a worker process inherits."""

import ctypes
import gc
import os
import random
import sys

# Whether the preloaded test module was there before this module imported it (python_preload).
PRELOADED_BEFORE_IMPORT = "fork_preload_mod" in sys.modules
import fork_preload_mod  # noqa: E402


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
    return None


def _fd_kind(fd):
    target = os.readlink(f"/proc/self/fd/{fd}")
    return target.split(":[", 1)[0] if ":[" in target else target


def _c_environ():
    env = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    out, i = {}, 0
    while env[i] is not None:
        key, _, value = env[i].partition(b"=")
        out[os.fsdecode(key)] = os.fsdecode(value)
        i += 1
    return out


class Probe:
    def snapshot(self):
        fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
        fork_server = sys.modules.get("troupe._fork_server")
        numpy = sys.modules.get("numpy")
        return {
            "pid": os.getpid(), "pgid": os.getpgid(0), "ppid": os.getppid(), "cwd": os.getcwd(),
            "umask": _status("Umask"), "sigblk": _status("SigBlk"), "sigign": _status("SigIgn"),
            "sigcgt": _status("SigCgt"),
            "fds": [(fd, _fd_kind(fd)) for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")],
            "env": dict(os.environ), "c_env": _c_environ(), "argv": list(sys.argv),
            "path": list(sys.path), "stdout_line_buffering": sys.stdout.line_buffering,
            "forked": bool(fork_server is not None and fork_server.forked),
            "random": random.random(),
            "numpy_random": float(numpy.random.random()) if numpy is not None else None,
            "preloaded_before_import": PRELOADED_BEFORE_IMPORT,
            "preload_imported_in": fork_preload_mod.IMPORTED_IN_PID,
            "gc_frozen": gc.get_freeze_count(),
        }


class OtherProbe(Probe):
    """Probe under another name, to map to another interpreter (python_executables)."""
