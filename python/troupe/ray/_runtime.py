"""The driver's runtime behind troupe.ray: a troupe.Cluster, the resource ledger
(troupe.ray._ledger), actors (troupe.ray._actor_directory), tasks (troupe.ray._tasks) and the
control socket that workers use for nested API calls (troupe.ray._proxy).

Threads: API calls come from any thread and take `lock` briefly; scheduling, restarts and queued
calls run on one dispatcher thread (post()); troupe's I/O threads only post() from callbacks.
"""

import collections
import os
import queue
import sys
import threading

from troupe.ray import _actor_directory, _ledger, _named, _proxy, _resources, _tasks


class DriverRuntime(_ledger.ResourceLedger, _actor_directory.ActorDirectory):
    """`api_of(runtime)`: the API that workers' nested calls are served by (the proxy server's
    ops); `api_host`: the address workers on other hosts reach this driver on."""

    def __init__(self, cluster, owned, namespace, runtime_env, install_as_ray, api_of,
                 api_host="127.0.0.1", standing=False):
        self.cluster = cluster
        self.owned = owned
        self.standing = standing  # a standing cluster: named actors are shared through its head
        self.namespace = namespace
        self.job_id = os.urandom(4).hex()
        self.job_env = dict((runtime_env or {}).get("env_vars") or {})
        self.job_runtime_env = dict(runtime_env or {})  # working_dir, py_modules, nsight too
        self.install_as_ray = install_as_ray
        self.lock = threading.RLock()
        self.nodes = [_resources.Node(h["index"], h["name"], h["address"])
                      for h in cluster.hosts()]
        self.node_at = {n.index: n for n in self.nodes}
        self.checked_feasible = set()  # requests whose feasibility was checked (warned once)
        self.exported = {}  # (ref id, index) -> ObjectRef: what workers can name
        self.leased = set()  # keys of `exported` held only by one worker's copy (reduce_ref)
        self.export_lock = threading.Lock()  # exported and leased; never held while pickling
        self.generators = {}  # ObjectRefGenerators passed to workers, by id
        self.actors = {}
        self.handles = {}  # actor id -> ActorHandles alive in this driver
        self.lifetime_decisions = []
        self.named = {}
        self.pgs = {}
        self.pending = []  # actor starts and placement groups waiting for resources
        # Tasks whose arguments are ready, waiting for resources: one FIFO per queue_key()
        # (same request, same strategy), so that scheduling costs O(1) amortised per task.
        self.task_queues = {}
        self._schedule_posted = False
        self.tasks = _tasks.TaskPool(self)
        # SimpleQueue: its put is reentrant, so post() may run inside __del__ (ActorHandle)
        self._jobs = queue.SimpleQueue()
        self._closed = False
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name="troupe-ray",
                                            daemon=True)
        self._dispatcher.start()
        # The head says when a booking this driver waits for may fit: schedule again (posted:
        # the listener runs on a troupe thread and must not take `lock`).
        self._freed_listener = cluster.on_resources_freed(lambda: self.post(self.post_schedule))
        self.server = _proxy.Server(api_of(self),
                                    os.path.join(cluster.session_dir, "ray-driver.sock"),
                                    api_host)

    # -- the dispatcher thread -----------------------------------------------------------
    def post(self, fn):
        self._jobs.put(fn)

    def _dispatch_loop(self):
        while True:
            fn = self._jobs.get()
            if fn is None:
                return
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a bug must not stop the dispatcher
                print(f"troupe.ray: internal error on the dispatcher: {e!r}", file=sys.stderr)

    def task_ready(self, task):
        """Queues `task` (its arguments are ready) for resources (any thread)."""
        with self.lock:
            key = task.queue_key()
            q = self.task_queues.get(key)
            if q is None:
                q = self.task_queues[key] = collections.deque()
            q.append(task)
        self.post_schedule()

    def post_schedule(self):
        """Posts one schedule() (however many are asked for before it runs)."""
        with self.lock:
            if self._schedule_posted:
                return
            self._schedule_posted = True
        self.post(self.schedule)

    def schedule(self):
        """Places what waits for resources, oldest first, whatever fits now: actor starts and
        placement groups, then the head of each task queue while it fits."""
        with self.lock:
            self._schedule_posted = False
            for key, q in list(self.task_queues.items()):
                while q:
                    task = q[0]
                    try:
                        placed = task.try_place(self)
                    except Exception as e:  # noqa: BLE001 - e.g. a removed placement group
                        placed = True
                        task.fail(e)
                    if not placed:
                        break
                    q.popleft()
                if not q:
                    del self.task_queues[key]
            for item in list(self.pending):
                try:
                    placed = item.try_place(self) if hasattr(item, "try_place") else \
                        self._try_place_pg(item)
                except Exception as e:  # noqa: BLE001 - e.g. a removed placement group
                    placed = True
                    item.fail(e) if hasattr(item, "fail") else None
                if placed:
                    self.pending.remove(item)

    def context_for(self, node, gpus, extra):
        ctx = {"node_id": node.node_id, "node_ip": node.address, "job_id": self.job_id,
               "namespace": self.namespace, "gpu_ids": list(gpus),
               "driver_socket": self.server.path, "driver_tcp": self.server.tcp_address,
               "driver_secret": self.server.secret.hex(), "install_as_ray": self.install_as_ray}
        ctx.update(extra)
        return ctx

    # -- tasks ---------------------------------------------------------------------------
    def submit_task(self, spec, fn_name, options, args, kwargs):
        return self.tasks.submit(spec, fn_name, options, args, kwargs)

    # -- shutdown ------------------------------------------------------------------------
    def shutdown(self):
        self._closed = True
        self.cluster.remove_resources_freed_listener(self._freed_listener)
        self.server.close()
        self._jobs.put(None)
        if threading.current_thread() is not self._dispatcher:
            self._dispatcher.join(5)  # what was posted runs first (e.g. publishing a name)
        if self.owned:
            self.cluster.shutdown()
        else:
            for a in list(self.actors.values()):
                w = a.worker
                if w is not None and not getattr(a, "attached", False) and \
                        not _named.is_detached(self, a.options):
                    w.stop(1.0)
            self.tasks.stop_all()
