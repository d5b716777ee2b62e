"""Where the code runs: the driver, or a worker hosting an actor or running a task (its node,
actor id, job id, GPU ids and the driver's control socket). A worker's context comes from
troupe.ray._host at start-up; a task's adds to it while the task runs."""

import collections
import contextlib
import os
import threading

_worker = None  # the worker's context dict; None in a driver
_task = threading.local()


def set_worker_context(context):
    global _worker
    _worker = dict(context)


def in_worker():
    return _worker is not None


def get(key, default=None):
    """`key` of the running task's context, else of the worker's."""
    task = getattr(_task, "context", None)
    if task and key in task:
        return task[key]
    if _worker is not None:
        return _worker.get(key, default)
    return default


def node_ip():
    """This process's host address (127.0.0.x for a simulated host)."""
    return get("node_ip") or os.environ.get("TROUPE_RAY_NODE_IP") or "127.0.0.1"


@contextlib.contextmanager
def task_scope(task_context):
    """Runs a task with its context and environment variables; restores both afterwards."""
    env = dict(task_context.get("env_vars") or {})
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    _task.context = task_context
    try:
        yield
    finally:
        _task.context = None
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# Leased refs (see troupe.ray._runtime.leasing): a worker's copy of a ref the driver made for it
# gives it back once dropped, unless it was pickled to go anywhere but an API call to the driver.
released_leases = collections.deque()  # keys to give back; appended from __del__, any thread
_sending = threading.local()


@contextlib.contextmanager
def sending_to_driver():
    """Within: this thread pickles an API request to the driver (refs in it are resolved there
    before the call returns, so pickling them does not make them escape)."""
    _sending.on = True
    try:
        yield
    finally:
        _sending.on = False


def is_sending_to_driver():
    return getattr(_sending, "on", False)
