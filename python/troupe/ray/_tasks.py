"""Ray tasks on troupe: each node keeps a pool of TaskHost workers (troupe.ray._host), started on
demand and reused; a task waits for its ObjectRef arguments and its resources, runs on an idle
runner of its node (one task at a time per runner), then gives both back."""

import contextlib

import troupe
from troupe.ray import _actors, _cells, _objects, _resources, _runtime_env, _serial
from troupe.ray import exceptions as rex


def task_error_of(fn_name):
    def error_of(e):
        if isinstance(e, troupe.TimeoutError):
            return rex.GetTimeoutError(str(e))
        return rex.WorkerCrashedError(f"the worker running task {fn_name} died: {e}")

    return error_of


class _Task:
    def __init__(self, pool, spec, fn_name, options, args, kwargs):
        self.pool = pool
        self.spec, self.fn_name, self.options = spec, fn_name, options
        self.args, self.kwargs = args, kwargs
        self.streaming = options.get("num_returns") == "streaming"
        self.error_of = task_error_of(fn_name)
        self.cell = None if self.streaming else _cells.Cell(_cells.decode_result,
                                                            self.error_of)
        self.stream = _cells.PendingStream() if self.streaming else None
        self.resolved = None  # (args, kwargs) with the ObjectRefs replaced, once resolved
        # Ray's defaults: a task is retried 3 times when its worker dies, never for an
        # exception it raises unless retry_exceptions says so (True, or exception types).
        retries = options.get("max_retries")
        self.retries_left = 3 if retries is None else int(retries)
        self.retry_exceptions = options.get("retry_exceptions") or False
        self.runner = None  # the troupe.Worker running it, while it runs
        self.attempt = None  # the troupe.Future of the running attempt
        self.cancelled = None  # the error ray.cancel ended it with

    def fail(self, error):
        self.pool.live.pop(id(self.cell), None)
        if self.stream is not None:
            self.stream.fail(error)
        else:
            self.cell.set_error(error)

    def cancel(self, force):
        """ray.cancel (under the runtime's lock): a task not yet running fails at once with
        TaskCancelledError and never runs; a running one has its worker stopped, and fails
        with TaskCancelledError (force) or, as the task's own error, RayTaskError of a
        TaskCancelledError (without force: Ray interrupts the task). Returns the worker to stop
        (the caller stops it outside the lock), or None."""
        if self.cancelled is not None or self.cell.done():
            return None
        error = rex.TaskCancelledError(f"task {self.fn_name} was cancelled")
        if self.runner is None:
            self.cancelled = error
            self.fail(error)
            return None
        if self.attempt is not None and self.attempt.done():
            return None  # it has ended; its result is on its way to the cell
        if not force:
            error = rex.RayTaskError(self.fn_name, "", error).as_instanceof_cause()
        self.cancelled = error
        return self.runner

    def deps_ready(self, runtime):
        """Whether every top-level ObjectRef argument is done; else calls runtime.task_ready
        (self) once they are (a callback on the first one not done, then again)."""
        waiting = next((r for r in _actors.top_level_refs(self.args, self.kwargs)
                        if not r._done()), None)
        if waiting is None:
            return True
        self._runtime = runtime
        waiting._cell.add_done_callback(lambda: runtime.post(self._deps_changed))
        return False

    def _deps_changed(self):
        if self.deps_ready(self._runtime):
            self._runtime.task_ready(self)

    def queue_key(self):
        """Tasks with equal keys need the same resources under the same strategy: when the
        oldest of them does not fit, none of the others does."""
        self.request = _resources.request_of(self.options, actor=False)
        s = self.options.get("scheduling_strategy")
        if s is None or isinstance(s, str):
            skey = s
        elif hasattr(s, "placement_group"):
            skey = ("pg", s.placement_group.id, s.placement_group_bundle_index)
        elif hasattr(s, "node_id"):
            skey = ("node", s.node_id, bool(s.soft))
        else:
            skey = ("id", id(s))
        return (tuple(sorted(self.request.items())), skey)

    def try_place(self, runtime):
        if self.cancelled is not None:
            return True  # dropped: ray.cancel failed it already
        if self.resolved is None:
            try:
                self.resolved = _actors.resolve_refs(self.args, self.kwargs)
            except Exception as e:  # noqa: BLE001 - a failed argument fails the task
                self.fail(e)
                return True
            self.args = self.kwargs = None
        alloc = runtime.allocate(self.request, self.options.get("scheduling_strategy"),
                                 waiting_as=f"tasks asking for {self.request}")
        if alloc is None:
            return False
        self.pool.run(self, alloc, self.request, *self.resolved)
        return True

    def should_retry(self, done):
        """Whether the finished attempt `done` (a troupe.Future) is retried (-1 retries: no
        limit, as Ray's)."""
        if self.retries_left == 0 or self.streaming:
            return False
        try:
            raw = done.result(0)
        except troupe.TroupeError:
            return True  # the worker died
        return _cells.raised_retried(raw, self.retry_exceptions)


class TaskPool:
    def __init__(self, runtime):
        self.runtime = runtime
        self.idle = {}  # (node index, host class) -> [troupe.Worker]
        self.all = []
        self.count = 0
        # Running tasks by key: [pool, request, gpus, blocked]; a task blocked in a nested
        # ray.get / ray.wait gives its resources back meanwhile, as Ray's does.
        self.running = {}
        self.live = {}  # id(cell) -> the _Task of a non-streaming task not ended (ray.cancel)
        self._keys = iter(range(1, 1 << 62))

    def submit(self, spec, fn_name, options, args, kwargs):
        task = _Task(self, spec, fn_name, options, args, kwargs)
        if not task.streaming:
            self.live[id(task.cell)] = task
        if task.deps_ready(self.runtime):
            self.runtime.task_ready(task)
        if task.streaming:
            return _objects.ObjectRefGenerator(task.stream, task.error_of)
        return _actors._refs(task.cell, options.get("num_returns"))

    def prestart(self, per_node):
        """Starts `per_node` task workers on every node now (forked by its fork server), so that
        the first tasks find a warm one; a task sent to one still starting waits for it. Which
        tasks run at once is the head's booking of their CPUs, not this pool's size."""
        cls = _runtime_env.host_class("TaskHost", None)
        with self.runtime.lock:
            for node in self.runtime.nodes:
                idle = self.idle.setdefault((node.index, cls), [])
                for _ in range(per_node):
                    idle.append(self._start_runner(node, cls))

    def _runner(self, node, cls):
        idle = self.idle.setdefault((node.index, cls), [])
        while idle:
            w = idle.pop()
            if w.alive():
                return w
        return self._start_runner(node, cls)

    def _start_runner(self, node, cls):
        self.count += 1
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
        pool, node, gpus, bundle = alloc
        env = dict((task.options.get("runtime_env") or {}).get("env_vars") or {})
        if request.get("GPU", 0) > 0:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        key = next(self._keys)
        self.running[key] = [pool, request, gpus, 0]
        strategy = task.options.get("scheduling_strategy")
        ctx = {"gpu_ids": list(gpus), "env_vars": env, "task_key": key,
               "placement_group": bundle and _pg_of(task.options),
               "bundle_index": bundle.index if bundle else -1,
               "capture_child_tasks": bool(bundle and getattr(
                   strategy, "placement_group_capture_child_tasks", False))}
        cls = _runtime_env.host_class("TaskHost",
                                      (task.options.get("runtime_env") or {}).get("py_executable"))
        try:
            runner = self._runner(node, cls)
            payload, buffers = _serial.dumps((args, kwargs))
            payload = _serial.inline(payload, buffers)
        except Exception as e:  # noqa: BLE001
            self._release(key)
            task.fail(e)
            return
        task.runner = runner
        if task.streaming:
            task.stream.bind(runner.stream("run_stream", task.spec, payload, buffers, ctx))
            done = task.stream._stream.done()
        else:
            done = runner.call("run", task.spec, payload, buffers, ctx)
            task.attempt = done

        def finished():
            with self.runtime.lock:
                self._release(key)
                task.runner = None
                if runner.alive():
                    self.idle.setdefault((node.index, cls), []).append(runner)
            if not task.streaming:
                if task.cancelled is not None:
                    task.resolved = None
                    task.fail(task.cancelled)
                elif task.should_retry(done):
                    if task.retries_left > 0:
                        task.retries_left -= 1
                    self.runtime.task_ready(task)
                else:
                    task.resolved = None  # the task holds no argument (nor handle) past its end
                    self.live.pop(id(task.cell), None)
                    task.cell.bind(done)
            self.runtime.schedule()

        done.add_done_callback(lambda _f: self.runtime.post(finished))

    def _release(self, key):
        entry = self.running.pop(key, None)
        if entry is not None and entry[3] == 0:
            entry[0].give(entry[1], entry[2])

    def blocked(self, key, refs):
        """A context in which the running task `key` waits for `refs` (a nested ray.get or
        ray.wait): its resources are free meanwhile, and taken back after (over the pool's
        amount if need be, as Ray's raylet does)."""
        @contextlib.contextmanager
        def scope():
            with self.runtime.lock:
                entry = self.running.get(key)
                if entry is None or all(r._cell is not None and r._done() for r in refs):
                    entry = None
                else:
                    entry[3] += 1
                    if entry[3] == 1:
                        entry[0].give(entry[1], entry[2])
            if entry is not None:
                self.runtime.post_schedule()
            try:
                yield
            finally:
                if entry is not None:
                    with self.runtime.lock:
                        entry[3] -= 1
                        if entry[3] == 0:
                            entry[0].take_over(entry[1], entry[2])

        return scope()

    def cancel(self, ref, force):
        """ray.cancel of `ref` (a driver's ref); see _Task.cancel. ValueError for force on an
        actor call, as Ray's; NotSupportedError for a pending actor call without force."""
        with self.runtime.lock:
            task = self.live.get(id(ref._cell))
            runner = task.cancel(force) if task is not None else None
        if runner is not None:
            runner.stop(0.0)
        if task is not None or ref._done():
            return  # an ended task, a put value: nothing to cancel
        if force:
            raise ValueError("force=True is not supported for actor tasks.")
        raise rex.NotSupportedError("ray.cancel of an actor call is not supported by troupe.ray: "
                                    "cancel tasks, or ray.kill the actor")

    def stop_all(self):
        for w in self.all:
            if w.alive():
                w.stop(1.0)


def _pg_of(options):
    s = options.get("scheduling_strategy")
    return getattr(getattr(s, "placement_group", None), "id", None)
