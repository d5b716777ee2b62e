"""troupe's exceptions: one class per error code of the C++ runtime (troupe::ErrorCode).

Every error raised by troupe is a :class:`TroupeError` whose ``code`` is the runtime's code name
("worker_died", ...) and whose message is the runtime's message (naming the worker, the method
and the cause). Catch a subclass to branch on the kind of failure.
"""

import re


class TroupeError(RuntimeError):
    """Base class of troupe's errors. ``code``: the error code's name; ``message``: the text."""

    code = "internal"

    def __init__(self, message, code=None):
        super().__init__(f"{code or self.code}: {message}")
        if code:
            self.code = code
        self.message = message


class InvalidArgumentError(TroupeError, ValueError):
    """A missing, extra or mistyped argument, an unknown axis, a bad option or layout."""

    code = "invalid_argument"


class UnknownClassError(TroupeError):
    """No worker class by that name (not registered, not importable, no executable)."""

    code = "unknown_class"


class UnknownMethodError(TroupeError, AttributeError):
    """The worker's class has no such method (the message lists its methods)."""

    code = "unknown_method"


class MethodFailedError(TroupeError):
    """The worker method raised. ``remote_type`` is the exception's type ("ValueError"),
    ``remote_message`` its message and ``remote_traceback`` the worker's traceback (for Python
    workers; empty for C++ workers, whose message carries the C++ exception's type)."""

    code = "method_failed"

    def __init__(self, message, code=None):
        super().__init__(message, code)
        self.remote_type, self.remote_message, self.remote_traceback = _parse_remote(message)


class ConstructorFailedError(MethodFailedError):
    """The worker's constructor raised (``remote_type`` etc. as for MethodFailedError)."""

    code = "constructor_failed"


class WorkerDiedError(TroupeError):
    """The worker process or its host is gone (the message names group, rank, host, pid, how it
    ended and the last lines of its stderr)."""

    code = "worker_died"


class ConnectionLostError(TroupeError):
    """A connection closed without a known death."""

    code = "connection_lost"


class TimeoutError(TroupeError, TimeoutError):  # noqa: A001 - also the builtin TimeoutError
    """A deadline passed (``Future.result(timeout)``, start-up, shutdown)."""

    code = "timeout"


class ProtocolError(TroupeError):
    """A malformed or oversized frame."""

    code = "protocol"


class UnauthenticatedError(TroupeError):
    """The peer did not prove the cluster token."""

    code = "unauthenticated"


class ExecutableNotFoundError(TroupeError):
    """The worker executable could not be started."""

    code = "executable_not_found"


class ResourceUnavailableError(TroupeError):
    """Not enough CPUs, GPUs, hosts or ports."""

    code = "resource_unavailable"


class ShutdownError(TroupeError):
    """The cluster or the worker was shut down."""

    code = "shutdown"


class HostLostError(TroupeError):
    """The worker's host stopped answering heartbeats or was cut off (the message names the host
    and the worker)."""

    code = "host_lost"


class InternalError(TroupeError):
    """A bug in troupe."""

    code = "internal"


class OutOfMemoryError(TroupeError):
    """A host's object store has no room (the message names the bytes requested, used and the
    capacity, and the host)."""

    code = "out_of_memory"


_BY_CODE = {
    cls.code: cls
    for cls in (InvalidArgumentError, UnknownClassError, UnknownMethodError, MethodFailedError,
                ConstructorFailedError, WorkerDiedError, ConnectionLostError, TimeoutError,
                ProtocolError, UnauthenticatedError, ExecutableNotFoundError,
                ResourceUnavailableError, ShutdownError, HostLostError, InternalError,
                OutOfMemoryError)
}

_REMOTE = re.compile(r"raised ([\w.]+): (.*?)\n(Traceback.*)?\Z", re.S)


def _parse_remote(message):
    m = _REMOTE.search(message)
    if not m:
        return "", "", ""
    return m.group(1), m.group(2), m.group(3) or ""


def make_error(code, message):
    """The exception object for a runtime error (used by troupe._core)."""
    return _BY_CODE.get(code, InternalError)(message, code)
