"""The worker side of Python classes (used by troupe._core in a worker process).

A Python worker is ``python -m troupe._role`` with TROUPE_ROLE=worker: the C++ worker runtime
serves calls and runs the class's constructor and methods on one method thread. Coroutine
methods (``async def``) run on this module's event loop, on a thread of its own: the method
thread starts them and goes on, so that they overlap and can await other coroutines; each replies
when it finishes. Generator methods stream their items.
"""

import asyncio
import inspect
import threading
import types

_loop = None
_loop_lock = threading.Lock()


def _event_loop():
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="troupe-asyncio", daemon=True).start()
        return _loop


def run_coroutine(coro):
    """Runs `coro` on the worker's event loop and returns its result (blocks the caller)."""
    return asyncio.run_coroutine_threadsafe(coro, _event_loop()).result()


def start_coroutine(coro, on_done):
    """Schedules `coro` on the worker's event loop and returns at once; ``on_done(future)`` runs
    on the loop's thread once it finished (its ``result()`` is the value or raises)."""
    asyncio.run_coroutine_threadsafe(coro, _event_loop()).add_done_callback(on_done)


def parameter_names(fn):
    """The names of ``inspect.signature(fn).parameters``, in order. For a plain function they are
    read from its code object: a far shorter path than inspect's, which matters in a forked
    worker, where each object touched costs a page copied from the fork server."""
    if type(fn) is types.FunctionType and "__wrapped__" not in fn.__dict__ \
            and "__signature__" not in fn.__dict__:
        code = fn.__code__
        positional = code.co_argcount
        keyword_only = positional + code.co_kwonlyargcount
        names = list(code.co_varnames[:positional])
        extra = keyword_only  # co_varnames: positional, keyword-only, *args, **kwargs
        if code.co_flags & inspect.CO_VARARGS:
            names.append(code.co_varnames[extra])
            extra += 1
        names.extend(code.co_varnames[positional:keyword_only])
        if code.co_flags & inspect.CO_VARKEYWORDS:
            names.append(code.co_varnames[extra])
        return names
    return list(inspect.signature(fn).parameters)


def _static_attribute(cls, name):
    """`name` as the class dictionary of `cls` or of a base holds it (no descriptor run)."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def public_methods(cls):
    """[(name, parameter names, is_generator, is_coroutine)] of the methods a driver may call:
    every public callable attribute of `cls` (names not starting with "_"), classmethods
    excluded."""
    out = []
    for name in dir(cls):
        if name.startswith("_") or name == "configure_worker":
            continue
        attr = _static_attribute(cls, name)
        if attr is None:
            attr = inspect.getattr_static(cls, name)  # from the metaclass, or dynamic
        if isinstance(attr, (classmethod, property)):
            continue
        fn = getattr(cls, name)
        if not callable(fn):
            continue
        try:
            params = parameter_names(fn)
            if not isinstance(attr, staticmethod):
                params = params[1:]
        except (TypeError, ValueError):
            params = []
        is_generator = inspect.isgeneratorfunction(fn)
        out.append((name, params, is_generator, inspect.iscoroutinefunction(fn)))
    return out
