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

from troupe import _worker
from troupe.ray import _context, _runtime_env, _serial, install
from troupe.ray._serial import is_plain


def resolve_definition(spec):
    """The function or class a definition spec names: ("ref", module, qualname) is imported
    (a @ray.remote wrapper found there is unwrapped), ("value", bytes) is unpickled."""
    if spec[0] == "value":
        return pickle.loads(_serial.data_of(spec[1]))
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


# The process that imported this module: the host's Python fork server when ray.init's cluster
# preloads it (then no actor or task worker imports troupe.ray again).
IMPORTED_BY_PID = os.getpid()


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
    error tuple. An async generator (an async actor's) runs on the worker's event loop, where
    the actor's other coroutines run, one item at a time."""
    try:
        args, kwargs = _arguments(a, b, pickled)
        items = fn(*args, **kwargs)
        if inspect.isasyncgen(items):
            while True:
                try:
                    item = _worker.run_coroutine(items.__anext__())
                except StopAsyncIteration:
                    return
                yield _ok(item)
        for item in items:
            yield _ok(item)
    except Exception as e:  # noqa: BLE001
        yield _error(fn_name, e)


def _apply_startup(context):
    _context.set_worker_context(context)
    if context.get("runtime_env_setup"):  # working_dir / py_modules (troupe.ray._runtime_env)
        _runtime_env.apply_in_worker(context["runtime_env_setup"])
    if context.get("install_as_ray"):
        install()


class ActorHost:
    """Hosts one Ray actor: constructs the user's class and runs its methods.

    ``call`` runs a method on troupe's method thread (calls run one at a time, in order);
    ``call_async`` serves async actors (coroutines overlap on the event loop) and threaded
    actors (methods run on threads); ``call_stream`` serves generator methods
    (num_returns="streaming").

    Concurrency groups, as Ray's: the default group has max_concurrency slots and each of
    `concurrency_groups` its own size; a call runs in the group named after "@" in its method
    name (``.options(concurrency_group=)``), else in its method's @ray.method group, else in
    the default one. A threaded actor has a thread pool per group (threads named
    "ray-actor-GROUP", "ray-actor" for the default group), an async actor a semaphore per group
    on its one event loop."""

    def __init__(self, spec, payload, buffers, context):
        _apply_startup(context)
        cls = resolve_definition(spec)
        self._name = getattr(cls, "__qualname__", str(cls))
        args, kwargs = _serial.loads(payload, buffers)
        self._obj = cls(*args, **kwargs)
        sizes = {None: int(context.get("max_concurrency") or 1)}  # None: the default group
        sizes.update((g, int(n)) for g, n in (context.get("concurrency_groups") or {}).items())
        self._sizes = sizes
        self._is_async = bool(context.get("is_async"))
        self._semaphores = {}  # async actors: made on the event loop, on first use
        self._pools = {}
        if not self._is_async and (len(sizes) > 1 or sizes[None] > 1):
            self._pools = {g: ThreadPoolExecutor(
                n, thread_name_prefix="ray-actor" if g is None else f"ray-actor-{g}")
                for g, n in sizes.items()}

    def _group_of(self, method):
        name, _, group = method.partition("@")
        fn = getattr(self._obj, name)
        group = group or getattr(fn, "__ray_concurrency_group__", None)
        return name, fn, group

    def ready(self):
        return os.getpid()

    def call(self, method, a, b, pickled):
        name, fn, _ = self._group_of(method)
        return _run(f"{self._name}.{name}", fn, a, b, pickled)

    def call_stream(self, method, a, b, pickled):
        name, fn, _ = self._group_of(method)
        yield from _stream(f"{self._name}.{name}", fn, a, b, pickled)

    async def call_async(self, method, a, b, pickled):
        name, fn, group = self._group_of(method)
        name = f"{self._name}.{name}"
        if self._pools:  # a threaded actor
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pools[group], _run, name, fn, a, b, pickled)
        semaphore = self._semaphores.get(group)
        if semaphore is None:
            semaphore = self._semaphores[group] = asyncio.Semaphore(self._sizes[group])
        async with semaphore:
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
        key = tuple(spec) if spec[0] == "ref" else ("value", bytes(_serial.data_of(spec[1])))
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
