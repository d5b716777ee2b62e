"""Ray tasks on troupe: each node keeps a pool of TaskHost workers (troupe.ray._host), started on
demand and reused; a task waits for its ObjectRef arguments and its resources, runs on an idle
runner of its node (one task at a time per runner), then gives both back."""

import threading

import troupe
from troupe.ray import _actors, _objects, _serial
from troupe.ray import exceptions as rex


def task_error_of(fn_name):
    def error_of(e):
        if isinstance(e, troupe.TimeoutError):
            return rex.GetTimeoutError(str(e))
        return rex.WorkerCrashedError(f"the worker running task {fn_name} died: {e}")

    return error_of


class _PendingStream:
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


class _Task:
    def __init__(self, pool, spec, fn_name, options, args, kwargs):
        self.pool = pool
        self.spec, self.fn_name, self.options = spec, fn_name, options
        self.args, self.kwargs = args, kwargs
        self.streaming = options.get("num_returns") == "streaming"
        self.error_of = task_error_of(fn_name)
        self.cell = None if self.streaming else _objects._Cell(_objects.decode_result,
                                                               self.error_of)
        self.stream = _PendingStream() if self.streaming else None
        self.waiting_on = None

    def fail(self, error):
        if self.stream is not None:
            self.stream.fail(error)
        else:
            self.cell.set_error(error)

    def try_place(self, runtime):
        waiting = [r for r in _actors.top_level_refs(self.args, self.kwargs) if not r._done()]
        if waiting:
            if self.waiting_on is not waiting[0]:
                self.waiting_on = waiting[0]
                waiting[0]._cell.add_done_callback(lambda: runtime.post(runtime.schedule))
            return False
        try:
            args, kwargs = _actors.resolve_refs(self.args, self.kwargs)
        except Exception as e:  # noqa: BLE001 - a failed argument fails the task
            self.fail(e)
            return True
        from troupe.ray import _runtime

        request = _runtime.request_of(self.options, actor=False)
        alloc = runtime.allocate(request, self.options.get("scheduling_strategy"))
        if alloc is None:
            return False
        self.pool.run(self, alloc, request, args, kwargs)
        return True


class TaskPool:
    def __init__(self, runtime):
        self.runtime = runtime
        self.idle = {}  # (node index, host class) -> [troupe.Worker]
        self.all = []
        self.count = 0

    def submit(self, spec, fn_name, options, args, kwargs):
        task = _Task(self, spec, fn_name, options, args, kwargs)
        with self.runtime.lock:
            self.runtime.pending.append(task)
        self.runtime.post(self.runtime.schedule)
        if task.streaming:
            return _objects.ObjectRefGenerator(task.stream, task.error_of)
        return _actors._refs(task.cell, options.get("num_returns"))

    def _runner(self, node, cls):
        idle = self.idle.setdefault((node.index, cls), [])
        while idle:
            w = idle.pop()
            if w.alive():
                return w
        self.count += 1
        from troupe.ray import _runtime_env  # the job's working_dir, py_modules, nsight

        setup, wrapper = _runtime_env.launch(self.runtime, None, self.runtime.job_env,
                                             "ray.init runtime_env")
        w = self.runtime.cluster.start_worker(
            cls, self.runtime.context_for(node, [], setup), host=node.index,
            name=f"ray-task-{node.index}-{self.count}", env=dict(self.runtime.job_env),
            launch_wrapper=wrapper)
        self.all.append(w)
        return w

    def run(self, task, alloc, request, args, kwargs):
        """Sends `task` to a runner of its node (under the runtime's lock)."""
        from troupe.ray import _runtime

        pool, node, gpus, bundle = alloc
        env = dict((task.options.get("runtime_env") or {}).get("env_vars") or {})
        if request.get("GPU", 0) > 0:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        ctx = {"gpu_ids": list(gpus), "env_vars": env,
               "placement_group": bundle and _pg_of(task.options),
               "bundle_index": bundle.index if bundle else -1}
        cls = _runtime.host_class("TaskHost",
                                  (task.options.get("runtime_env") or {}).get("py_executable"))
        try:
            runner = self._runner(node, cls)
            payload, buffers = _serial.dumps((args, kwargs))
            payload = _serial.inline(payload, buffers)
        except Exception as e:  # noqa: BLE001
            pool.give(request, gpus)
            task.fail(e)
            return
        if task.streaming:
            task.stream.bind(runner.stream("run_stream", task.spec, payload, buffers, ctx))
            done = task.stream._stream.done()
        else:
            done = runner.call("run", task.spec, payload, buffers, ctx)
            task.cell.bind(done)

        def finished():
            with self.runtime.lock:
                pool.give(request, gpus)
                if runner.alive():
                    self.idle.setdefault((node.index, cls), []).append(runner)
            self.runtime.schedule()

        done.add_done_callback(lambda _f: self.runtime.post(finished))

    def stop_all(self):
        for w in self.all:
            if w.alive():
                w.stop(1.0)


def _pg_of(options):
    s = options.get("scheduling_strategy")
    return getattr(getattr(s, "placement_group", None), "id", None)
