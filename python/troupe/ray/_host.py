"""The worker side of troupe.ray: the troupe worker classes that host a Ray actor (ActorHost)
and run Ray tasks (TaskHost). They run in troupe's Python workers; the driver calls them through
troupe's public Python API (troupe.Cluster.start_worker, Worker.call / stream).

Every value crosses as (payload, buffers) from troupe.ray._serial; a result is
("ok", payload, buffers) or ("err", pickled exception or None, type name, message, traceback,
pid, ip), so that the driver can raise a RayTaskError that is also the original type.
"""

import asyncio
import importlib
import inspect
import os
import pickle
import traceback
from concurrent.futures import ThreadPoolExecutor

from troupe.ray import _context, _serial


def resolve_definition(spec):
    """The function or class a definition spec names: ("ref", module, qualname) is imported
    (a @ray.remote wrapper found there is unwrapped), ("value", bytes) is unpickled."""
    if spec[0] == "value":
        return pickle.loads(spec[1])
    _, module, qualname = spec
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
        obj = getattr(obj, "_troupe_ray_target", obj)
    return obj


def _error(fn_name, exc):
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickled = pickle.dumps(exc)
        pickle.loads(pickled)
    except Exception:  # noqa: BLE001 - an exception that does not survive pickling
        pickled = None
    return ("err", pickled, f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc), tb,
            os.getpid(), _context.node_ip())


_PLAIN = (type(None), bool, int, float, str)


def is_plain(value):
    """Whether troupe carries `value` natively (no pickling needed on either side)."""
    return type(value) in _PLAIN


def _ok(value):
    if is_plain(value):
        return ("ok", value)
    payload, buffers = _serial.dumps(value)
    return ("okp", payload, buffers)


def _arguments(a, b, pickled):
    """(args, kwargs): sent as troupe values, or pickled as (payload, buffers)."""
    return _serial.loads(a, b) if pickled else (a, b)


def _run(fn_name, fn, a, b, pickled):
    try:
        args, kwargs = _arguments(a, b, pickled)
        return _ok(fn(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - reported to the caller as a RayTaskError
        return _error(fn_name, e)


def _stream(fn_name, fn, a, b, pickled):
    """Yields each item of generator `fn` as a result tuple; an error ends the stream with an
    error tuple."""
    try:
        args, kwargs = _arguments(a, b, pickled)
        for item in fn(*args, **kwargs):
            yield _ok(item)
    except Exception as e:  # noqa: BLE001
        yield _error(fn_name, e)


def _apply_startup(context):
    _context.set_worker_context(context)
    if context.get("install_as_ray"):
        from troupe.ray import install

        install()


class ActorHost:
    """Hosts one Ray actor: constructs the user's class and runs its methods.

    ``call`` runs a method on troupe's method thread (calls run one at a time, in order);
    ``call_async`` serves async actors (coroutines overlap on the event loop, up to
    max_concurrency) and threaded actors (max_concurrency > 1: methods run on that many
    threads); ``call_stream`` serves generator methods (num_returns="streaming")."""

    def __init__(self, spec, payload, buffers, context):
        _apply_startup(context)
        cls = resolve_definition(spec)
        self._name = getattr(cls, "__qualname__", str(cls))
        args, kwargs = _serial.loads(payload, buffers)
        self._obj = cls(*args, **kwargs)
        concurrency = int(context.get("max_concurrency") or 1)
        self._semaphore = None
        self._pool = None
        if context.get("is_async"):
            self._concurrency = concurrency
        elif concurrency > 1:
            self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="ray-actor")

    def ready(self):
        return os.getpid()

    def call(self, method, a, b, pickled):
        return _run(f"{self._name}.{method}", getattr(self._obj, method), a, b, pickled)

    def call_stream(self, method, a, b, pickled):
        yield from _stream(f"{self._name}.{method}", getattr(self._obj, method), a, b, pickled)

    async def call_async(self, method, a, b, pickled):
        name = f"{self._name}.{method}"
        fn = getattr(self._obj, method)
        if self._pool is not None:  # a threaded actor
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, _run, name, fn, a, b, pickled)
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._concurrency)
        async with self._semaphore:
            try:
                args, kwargs = _arguments(a, b, pickled)
                out = fn(*args, **kwargs)
                if inspect.isawaitable(out):
                    out = await out
                return _ok(out)
            except Exception as e:  # noqa: BLE001
                return _error(name, e)


class TaskHost:
    """Runs Ray tasks, one at a time, each with its own environment variables (runtime_env
    env_vars, CUDA_VISIBLE_DEVICES) set for the duration of the task."""

    def __init__(self, context):
        _apply_startup(context)
        self._definitions = {}

    def ready(self):
        return os.getpid()

    def _fn(self, spec):
        key = spec if spec[0] == "ref" else ("value", hash(spec[1]))
        fn = self._definitions.get(key)
        if fn is None:
            fn = self._definitions[key] = resolve_definition(spec)
        return fn

    def run(self, spec, payload, buffers, task_context):
        with _context.task_scope(task_context):
            fn = self._fn(spec)
            return _run(getattr(fn, "__qualname__", "task"), fn, payload, buffers, True)

    def run_stream(self, spec, payload, buffers, task_context):
        with _context.task_scope(task_context):
            fn = self._fn(spec)
            yield from _stream(getattr(fn, "__qualname__", "task"), fn, payload, buffers, True)



def __getattr__(name):
    """ActorHost__py_<hash> and TaskHost__py_<hash>: aliases of the hosts that troupe maps to
    another interpreter (runtime_env py_executable)."""
    base, sep, _ = name.partition("__py_")
    if sep and base in ("ActorHost", "TaskHost"):
        return globals()[base]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
