"""The completion slots behind ObjectRefs: a Cell holds one result (a value, an error, or a
troupe.Future it is bound to), a PendingStream the troupe.Stream of a streaming call once it
is sent. decode_result turns a host's result tuple (troupe.ray._host) into the value."""

import itertools
import os
import pickle
import threading
import time

import troupe
from troupe.ray import _serial
from troupe.ray import exceptions as rex

_ids = itertools.count(1)
_PREFIX = os.urandom(8).hex()


def new_id():
    return f"{_PREFIX}{next(_ids):016x}"


def raised_retried(raw, retry_exceptions):
    """Whether host result tuple `raw` is an exception that `retry_exceptions` (Ray's option:
    False, True, or exception types) retries."""
    if raw[0] != "err" or not retry_exceptions:
        return False
    if retry_exceptions is True:
        return True
    try:
        cause = pickle.loads(raw[1]) if raw[1] is not None else None
    except Exception:  # noqa: BLE001
        cause = None
    return cause is not None and isinstance(cause, tuple(retry_exceptions))


class Cell:
    """One result, completed once. Thread-safe. `decode(raw)` turns the bound future's raw
    result into the value (or raises); `error_of(troupe_error)` maps the future's failure."""

    __slots__ = ("_lock", "_bound", "_future", "_decode", "_error_of", "_state", "_value",
                 "_callbacks", "_waiters", "_hooked")

    def __init__(self, decode=None, error_of=None):
        self._lock = threading.Lock()
        self._bound = threading.Event()
        self._future = None
        self._decode = decode
        self._error_of = error_of
        self._state = None  # None, "value", "error"
        self._value = None
        self._callbacks = []
        self._waiters = None  # the Events of ray.wait calls waiting on this cell
        self._hooked = False  # whether _wake_waiters is registered (once per cell)

    @classmethod
    def of_future(cls, future, decode, error_of):
        """A cell bound to `future` from the start (the fast path of an actor call)."""
        c = cls.__new__(cls)
        c._lock = threading.Lock()
        c._bound = ALWAYS_SET
        c._future, c._decode, c._error_of = future, decode, error_of
        c._state = c._value = None
        c._callbacks = []
        c._waiters = None
        c._hooked = False
        return c

    @classmethod
    def of_value(cls, value):
        c = cls()
        c.set_value(value)
        return c

    def bind(self, future):
        """Completes this cell with `future`'s outcome (a troupe.Future or troupe.Stream-free
        object with result/wait/done/add_done_callback)."""
        with self._lock:
            self._future = future
            callbacks, self._callbacks = self._callbacks, []
        self._bound.set()
        for fn in callbacks:
            future.add_done_callback(lambda _f, fn=fn: fn())

    def set_value(self, value):
        self._complete("value", value)

    def set_error(self, error):
        self._complete("error", error)

    def _complete(self, state, value):
        with self._lock:
            if self._bound.is_set():
                return
            self._state, self._value = state, value
            callbacks, self._callbacks = self._callbacks, []
        self._bound.set()
        for fn in callbacks:
            fn()

    def done(self):
        if not self._bound.is_set():
            return False
        return self._future is None or self._future.done()

    def wait(self, timeout=None):
        """Whether the cell completed within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._bound.wait(timeout):
            return False
        if self._future is None:
            return True
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self._future.wait(left)

    def add_done_callback(self, fn):
        """Calls fn() once complete (at once when it is; else on the thread that completes it:
        keep it short)."""
        with self._lock:
            if not self._bound.is_set():
                self._callbacks.append(fn)
                return
        if self._future is None:
            fn()
        else:
            self._future.add_done_callback(lambda _f: fn())

    def add_waiter(self, event):
        """Sets `event` once this cell completes (at once if it has); remove_waiter(event) takes
        it off. One callback per cell however many waits come and go, so a loop of ray.wait
        over the same refs does not pile callbacks onto their futures."""
        with self._lock:
            if self._waiters is None:
                self._waiters = set()
            self._waiters.add(event)
            hook = not self._hooked
            self._hooked = True
        if hook:
            self.add_done_callback(self._wake_waiters)
        elif self.done():
            event.set()

    def remove_waiter(self, event):
        with self._lock:
            if self._waiters is not None:
                self._waiters.discard(event)

    def _wake_waiters(self):
        with self._lock:
            waiters, self._waiters = self._waiters, None
        for event in waiters or ():
            event.set()

    def result(self, timeout=None):
        """The value; raises the error, or GetTimeoutError after `timeout` seconds."""
        if not self.wait(timeout):
            raise rex.GetTimeoutError(f"Get timed out: some object(s) not ready after {timeout} s")
        if self._future is not None:
            with self._lock:
                if self._state is None:
                    try:
                        raw = self._future.result(0)
                        self._state, self._value = "value", self._decode(raw)
                    except troupe.TroupeError as e:
                        self._state, self._value = "error", self._error_of(e)
                    except Exception as e:  # noqa: BLE001 - decode() raised the task's error
                        self._state, self._value = "error", e
        if self._state == "error":
            raise self._value
        return self._value


ALWAYS_SET = threading.Event()  # the binding event of cells bound when made
ALWAYS_SET.set()


def decode_result(raw):
    """The value of a host's result tuple (troupe.ray._host); raises the task's error."""
    if raw[0] == "ok":
        return raw[1]
    if raw[0] == "okp":
        return _serial.loads(raw[1], raw[2])
    _, pickled, type_name, message, tb, pid, ip = raw
    cause = None
    if pickled is not None:
        try:
            cause = pickle.loads(pickled)
        except Exception:  # noqa: BLE001
            cause = None
    if cause is None:
        cause = rex.RaySystemError(f"{type_name}: {message}")
    if isinstance(cause, rex.RayTaskError):  # raised by a nested ray.get: keep it
        raise cause
    err = rex.RayTaskError(type_name.rsplit(".", 1)[-1], tb, cause, pid=pid, ip=ip)
    raise err.as_instanceof_cause() from None


class PendingStream:
    """A troupe.Stream that exists once the task is dispatched."""

    def __init__(self):
        self._bound = threading.Event()
        self._stream = None
        self._error = None

    def bind(self, stream):
        self._stream = stream
        self._bound.set()

    def fail(self, error):
        self._error = error
        self._bound.set()

    set_error = fail

    def next(self, timeout=None):
        if not self._bound.wait(timeout):
            raise troupe.TimeoutError(f"no item within {timeout} s")
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._stream is None:
            raise StopIteration
        return self._stream.next(timeout)
