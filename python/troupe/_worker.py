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


def public_methods(cls):
    """[(name, parameter names, is_generator, is_coroutine)] of the methods a driver may call:
    every public callable attribute of `cls` (names not starting with "_"), classmethods
    excluded."""
    out = []
    for name in dir(cls):
        if name.startswith("_") or name == "configure_worker":
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, (classmethod, property)):
            continue
        fn = getattr(cls, name)
        if not callable(fn):
            continue
        try:
            params = [p for p in inspect.signature(fn).parameters][1:]
            if isinstance(attr, staticmethod):
                params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = []
        is_generator = inspect.isgeneratorfunction(fn)
        out.append((name, params, is_generator, inspect.iscoroutinefunction(fn)))
    return out
