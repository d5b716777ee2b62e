"""The driver's runtime behind troupe.ray: a troupe.Cluster, the resource ledger, actors, tasks
and placement groups, and the control socket that workers use for nested API calls.

Threads: API calls come from any thread and take `lock` briefly; scheduling, restarts and queued
calls run on one dispatcher thread (post()); troupe's I/O threads only post() from callbacks.
"""

import collections
import contextlib
import os
import queue
import sys
import threading
import warnings

from troupe.ray import _actors, _named, _objects, _resources, _serial, _tasks
from troupe.ray import exceptions as rex

_HOST = "troupe.ray._host"
_driver = None  # the DriverRuntime of this process, once ray.init ran
_driver_lock = threading.Lock()


def current():
    return _driver


def set_current(runtime):
    global _driver
    _driver = runtime


_leasing = threading.local()


@contextlib.contextmanager
def leasing():
    """Within: refs pickled on this thread that no worker has seen yet (the refs a worker's
    put, task submission or actor call just made for it, in the reply) are leased, not pinned:
    the worker's copy is a LeasedObjectRef, which gives the ref back (release_leases) once
    dropped, unless it was pickled to go anywhere but an API call to the driver. Any other
    export pins the ref in `exported` until shutdown."""
    _leasing.on = True
    try:
        yield
    finally:
        _leasing.on = False


def reduce_ref(ref):
    """ObjectRef.__reduce__: the ref crosses by id; the driver keeps it reachable by that id."""
    key = (ref._id, ref._index)
    if ref._cell is not None and _driver is not None:
        with _driver.export_lock:
            if getattr(_leasing, "on", False) and key not in _driver.exported:
                _driver.exported[key] = ref
                _driver.leased.add(key)
                return (restore_leased_ref, (key,))
            _driver.exported[key] = ref
            _driver.leased.discard(key)
    return (restore_ref, (key,))


def release_leases(keys):
    """The worker's copies of these leased refs are gone: forget them here (the driver's own
    holders, if any, keep the objects alive). Keys pinned since are kept."""
    with _driver.export_lock:
        for key in keys:
            key = tuple(key)
            if key in _driver.leased:
                _driver.leased.discard(key)
                _driver.exported.pop(key, None)


def restore_ref(key):
    if _driver is not None and key in _driver.exported:
        return _driver.exported[key]
    return _objects.ObjectRef(key[0], None, key[1])


def restore_leased_ref(key):
    if _driver is not None and key in _driver.exported:
        return _driver.exported[key]
    return _objects.LeasedObjectRef(key[0], None, key[1])


def export_generator(gen):
    """Makes the ObjectRefGenerator `gen` reachable by id from workers (kept until shutdown)."""
    if _driver is None:
        raise rex.RaySystemError("an ObjectRefGenerator can only be exported by the driver")
    gen_id = getattr(gen, "_export_id", None)
    if gen_id is None:
        gen_id = gen._export_id = _objects.new_id()
        _driver.generators[gen_id] = gen
    return gen_id


def restore_generator(gen_id):
    if _driver is not None and gen_id in _driver.generators:
        return _driver.generators[gen_id]
    return _objects.RemoteObjectRefGenerator(gen_id)


class PlacementGroupState:
    def __init__(self, pg_id, requests, strategy, name):
        self.pg_id = pg_id
        self.requests = requests
        self.strategy = strategy
        self.name = name
        self.bundles = None  # [Bundle] once placed
        self.ready_cell = _objects._Cell()
        self.removed = False

    def as_group(self):
        """The user's PlacementGroup of this state."""
        from troupe.ray.util.placement_group import PlacementGroup

        return PlacementGroup(self.pg_id, [dict(r) for r in self.requests], self.strategy,
                              self.name)


class DriverRuntime:
    def __init__(self, cluster, owned, namespace, runtime_env, install_as_ray, custom_resources,
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
        self.nodes = [_resources.Node(h["index"], h["name"], h["address"], h["num_cpus"],
                                      h["gpu_ids"], _resources.custom_of(
                                          h, custom_resources if h["index"] == 0 else None))
                      for h in cluster.hosts()]
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
        self.spread_next = 0
        self.tasks = _tasks.TaskPool(self)
        # SimpleQueue: its put is reentrant, so post() may run inside __del__ (ActorHandle)
        self._jobs = queue.SimpleQueue()
        self._closed = False
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name="troupe-ray",
                                            daemon=True)
        self._dispatcher.start()
        from troupe.ray import _proxy

        self.server = _proxy.Server(self, os.path.join(cluster.session_dir, "ray-driver.sock"),
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

    # -- resources -----------------------------------------------------------------------
    def context_for(self, node, gpus, extra):
        ctx = {"node_id": node.node_id, "node_ip": node.address, "job_id": self.job_id,
               "namespace": self.namespace, "gpu_ids": list(gpus),
               "driver_socket": self.server.path, "driver_tcp": self.server.tcp_address,
               "driver_secret": self.server.secret.hex(), "install_as_ray": self.install_as_ray}
        ctx.update(extra)
        return ctx

    def allocate(self, request, strategy):
        """(pool, node, gpus, bundle) for `request` under `strategy`, or None when it does not
        fit now. Raises PlacementGroupSchedulingError for a bad bundle index or a removed
        group."""
        from troupe.ray.util.scheduling_strategies import (
            NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy)

        if isinstance(strategy, PlacementGroupSchedulingStrategy):
            pg = self.pgs.get(strategy.placement_group.id)
            if pg is None or pg.removed:
                raise rex.PlacementGroupSchedulingError(
                    f"placement group {strategy.placement_group.id} was removed")
            if pg.bundles is None:
                return None
            idx = strategy.placement_group_bundle_index
            if idx is None or idx < 0:
                candidates = pg.bundles
            elif idx >= len(pg.bundles):
                raise rex.PlacementGroupSchedulingError(
                    f"placement_group_bundle_index {idx} is out of range: the group has "
                    f"{len(pg.bundles)} bundles")
            else:
                candidates = [pg.bundles[idx]]
            for b in candidates:
                gpus = b.pool.take(request)
                if gpus is not None:
                    return (b.pool, b.node, gpus, b)
            return None
        live = [n for n in self.nodes if n.alive]
        if isinstance(strategy, NodeAffinitySchedulingStrategy):
            target = [n for n in live if n.node_id == strategy.node_id]
            if not target and not strategy.soft:
                raise rex.TaskUnschedulableError(
                    f"NodeAffinitySchedulingStrategy: node {strategy.node_id} is not alive")
            order = target + ([n for n in live if n not in target] if strategy.soft else [])
        elif strategy == "SPREAD":
            k = self.spread_next % max(1, len(live))
            order = live[k:] + live[:k]
            self.spread_next += 1
        else:
            order = live
        for n in order:
            gpus = n.pool.take(request)
            if gpus is not None:
                return (n.pool, n, gpus, None)
        if not _resources.feasible_somewhere(live, request):
            warnings.warn(f"troupe.ray: no node can ever hold {request}; it waits until one "
                          "joins", stacklevel=2)
        return None

    # -- placement groups ----------------------------------------------------------------
    def create_pg(self, requests, strategy, name):
        pg = PlacementGroupState(_objects.new_id()[-18:], requests, strategy, name)
        with self.lock:
            self.pgs[pg.pg_id] = pg
            if not self._try_place_pg(pg):
                self.pending.append(pg)
        return pg

    def _try_place_pg(self, pg):
        if pg.removed:
            return True
        where = _resources.place_bundles(self.nodes, pg.requests, pg.strategy)
        if where is None:
            return False
        pg.bundles = []
        for i, (r, ni) in enumerate(zip(pg.requests, where)):
            node = self.nodes[ni]
            gpus = node.pool.take(r)
            pg.bundles.append(_resources.Bundle(i, r, node, gpus))
        pg.ready_cell.set_value(pg.as_group())  # ray.get(pg.ready()) is the group, as Ray's
        return True

    def remove_pg(self, pg_id):
        with self.lock:
            pg = self.pgs.get(pg_id)
            if pg is None or pg.removed:
                return
            pg.removed = True
            if pg in self.pending:
                self.pending.remove(pg)
            for a in list(self.actors.values()):
                if a.allocation and a.allocation[3] is not None and \
                        a.allocation[3] in (pg.bundles or []):
                    self.kill(a.actor_id, True)
            for b in pg.bundles or []:
                b.node.pool.give(b.request, b.gpus)
            pg.ready_cell.set_error(rex.PlacementGroupSchedulingError(
                f"placement group {pg_id} was removed"))
        self.post_schedule()

    # -- actor lifetime (handles) ---------------------------------------------------------
    def handle_acquired(self, actor_id):
        """An ActorHandle of `actor_id` was made in this driver."""
        with self.lock:
            self.handles[actor_id] = self.handles.get(actor_id, 0) + 1

    def handle_escaped(self, actor_id):
        """A handle of `actor_id` was pickled: it may live on in a worker, which this driver
        does not count, so the actor lives until ray.kill, its placement group's removal or
        shutdown."""
        actor = self.actors.get(actor_id)
        if actor is not None:
            actor.escaped = True

    def handle_released(self, actor_id):
        """An ActorHandle of `actor_id` made in this driver was garbage-collected (any thread,
        inside __del__: only takes self.lock and posts). The last one ends the actor unless it
        is detached or a handle escaped; the decision is appended to self.lifetime_decisions as
        (actor_id, "collected" | "kept: detached" | "kept: another driver's actor" |
        "kept: named on a standing cluster" | "kept: a handle left the driver")."""
        with self.lock:
            n = self.handles.get(actor_id, 0) - 1
            if n > 0:
                self.handles[actor_id] = n
                return
            self.handles.pop(actor_id, None)
            actor = self.actors.get(actor_id)
            if actor is None or actor.dead is not None or self._closed:
                return
            if actor.options.get("lifetime") == "detached":
                decision = "kept: detached"
            elif getattr(actor, "attached", False):
                decision = "kept: another driver's actor"
            elif actor.name and self.standing:
                decision = "kept: named on a standing cluster"
            elif actor.escaped:
                decision = "kept: a handle left the driver"
            else:
                decision = "collected"
            self.lifetime_decisions.append((actor_id, decision))
        if decision == "collected":
            self.post(actor.collect)

    # -- actors --------------------------------------------------------------------------
    def _live_named(self, ns, name, options):
        """This driver's live actor named (ns, name) when `options` ask get_if_exists, None when
        there is none; ValueError when the name is taken otherwise. Under self.lock."""
        if not name or (ns, name) not in self.named:
            return None
        existing = self.actors[self.named[(ns, name)]]
        if existing.dead is not None:
            return None
        if options.get("get_if_exists"):
            return existing
        raise rex.ActorAlreadyExistsError(f"The name {name} (namespace={ns}) is already taken "
                                          f"by actor {existing.actor_id}")

    def create_actor(self, spec, cls_name, methods, options, args, kwargs):
        name, ns = options.get("name"), options.get("namespace") or self.namespace
        options = dict(options, namespace=ns)
        with self.lock:
            existing = self._live_named(ns, name, options)
            if existing is not None:
                return existing
        actor = _actors.ActorState(self, _objects.new_id()[-24:], spec, cls_name, methods,
                                   options, args, kwargs)
        if name and self.standing:
            taken = _named.claim(self, actor)
            if taken is not None:
                if options.get("get_if_exists"):
                    rec = _named.lookup(self, ns, name)
                    if rec is not None:
                        return _named.attach(self, rec)
                raise rex.ActorAlreadyExistsError(
                    f"The name {name} (namespace={ns}) is already taken by an actor of another "
                    f"driver ({taken['host'] or 'starting'})")
        with self.lock:
            existing = None if self.standing else self._live_named(ns, name, options)
            if existing is not None:  # another thread's, meanwhile
                return existing
            self.actors[actor.actor_id] = actor
            if name:
                self.named[(ns, name)] = actor.actor_id
            self.pending.append(_ActorStart(actor))
        self.post_schedule()
        return actor

    def get_actor(self, name, namespace):
        ns = namespace or self.namespace
        with self.lock:
            actor_id = self.named.get((ns, name))
            if actor_id is not None and self.actors[actor_id].dead is None:
                return self.actors[actor_id]
        rec = _named.lookup(self, ns, name) if self.standing else None
        if rec is None:
            raise ValueError(f"Failed to look up actor with name '{name}' in namespace '{ns}'")
        return _named.attach(self, rec)

    def start_actor(self, actor, allocation):
        pool, node, gpus, bundle = allocation
        actor.allocation = allocation
        actor.node = node
        opts = actor.options
        env = dict(self.job_env)
        env.update((opts.get("runtime_env") or {}).get("env_vars") or {})
        from troupe.ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = opts.get("scheduling_strategy")
        extra = {"actor_id": actor.actor_id, "is_async": actor.is_async,
                 "max_concurrency": opts.get("max_concurrency") or (1000 if actor.is_async else 1),
                 "concurrency_groups": dict(opts.get("concurrency_groups") or {})}
        if isinstance(strategy, PlacementGroupSchedulingStrategy):
            extra.update(placement_group=strategy.placement_group.id,
                         bundle_index=bundle.index if bundle else -1,
                         capture_child_tasks=bool(strategy.placement_group_capture_child_tasks))
        payload, buffers = _serial.dumps((actor.args, actor.kwargs))
        payload = _serial.inline(payload, buffers)
        actor.incarnation += 1
        base = f"{actor.name or actor.cls_name.rsplit('.', 1)[-1]}-{actor.actor_id[-6:]}"
        name = base if actor.incarnation == 1 else f"{base}-r{actor.incarnation - 1}"
        cls = host_class("ActorHost", (opts.get("runtime_env") or {}).get("py_executable"))
        from troupe.ray import _runtime_env

        setup, wrapper = _runtime_env.launch(self, opts.get("runtime_env"), env,
                                             f"{actor.cls_name} runtime_env")
        extra.update(setup)
        worker = self.cluster.start_worker(
            cls, actor.spec, payload, buffers, self.context_for(node, gpus, extra),
            host=node.index, name=f"ray-{name}", env=env, gpus=gpus,
            detached=_named.is_detached(self, opts), launch_wrapper=wrapper)
        actor.started(worker)
        if actor.name and self.standing:
            worker.ready().add_done_callback(
                lambda f: f.exception() is None and self.post(
                    lambda: _named.publish(self, actor, worker)))
        worker.died().add_done_callback(
            lambda f: self.post(lambda: self._actor_died(actor, worker, f)))

    def _actor_died(self, actor, worker, died_future):
        forget = None
        with self.lock:
            if actor.worker is not worker and actor.dead is None and actor.worker is not None:
                return  # an earlier incarnation
            if actor.allocation is not None:
                pool, _, gpus, _ = actor.allocation
                pool.give(_request_of(actor.options, actor=True), gpus)
                actor.allocation = None
            try:
                how = died_future.result(0)
            except Exception as e:  # noqa: BLE001
                how = str(e)
            if actor.restarts_left != 0 and not actor.no_restart and not self._closed:
                actor.restarts_left -= 1
                with actor.lock:
                    actor.worker = None
                self.pending.append(_ActorStart(actor))
            else:
                actor.mark_dead(rex.ActorDiedError(
                    actor.actor_id, f"The actor {actor.cls_name} ({actor.actor_id}) died: {how}"))
                if actor.name and self.named.get((actor.namespace, actor.name)) == actor.actor_id:
                    del self.named[(actor.namespace, actor.name)]
                if actor.name and self.standing and not self._closed and \
                        not getattr(actor, "attached", False):
                    forget = worker  # its record at the head, filled in with it or not yet
        if forget is not None:
            _named.forget(self, actor, forget)
        self.schedule()

    def kill(self, actor_id, no_restart=True):
        actor = self.actors.get(actor_id)
        if actor is None:
            raise ValueError(f"ray.kill: no actor {actor_id}")
        actor.no_restart = actor.no_restart or no_restart
        worker = actor.worker
        if worker is None:
            if no_restart:
                actor.mark_dead(rex.ActorDiedError(actor_id, "The actor was killed by ray.kill"))
                with self.lock:
                    self.pending = [p for p in self.pending if getattr(p, "actor", None) is not actor]
                    if actor.name:
                        self.named.pop((actor.namespace, actor.name), None)
            return
        worker.stop(0.0)
        if no_restart and actor.name:
            with self.lock:  # free now; the death is recorded when its callback runs
                if self.named.get((actor.namespace, actor.name)) == actor_id:
                    del self.named[(actor.namespace, actor.name)]
        if no_restart and actor.name and self.standing:
            _named.forget(self, actor, worker)

    # -- tasks ---------------------------------------------------------------------------
    def submit_task(self, spec, fn_name, options, args, kwargs):
        return self.tasks.submit(spec, fn_name, options, args, kwargs)

    # -- shutdown ------------------------------------------------------------------------
    def shutdown(self):
        self._closed = True
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


class _ActorStart:
    """A pending actor creation."""

    def __init__(self, actor):
        self.actor = actor

    def try_place(self, runtime):
        if self.actor.dead is not None:
            return True
        alloc = runtime.allocate(_request_of(self.actor.options, actor=True),
                                 self.actor.options.get("scheduling_strategy"))
        if alloc is None:
            return False
        runtime.start_actor(self.actor, alloc)
        return True

    def fail(self, error):
        self.actor.mark_dead(rex.ActorDiedError(self.actor.actor_id, f"could not be scheduled: "
                                                f"{error}"))


def _request_of(options, actor):
    cpus = options.get("num_cpus")
    out = {"CPU": float(cpus if cpus is not None else (0 if actor else 1)),
           "GPU": float(options.get("num_gpus") or 0)}
    if options.get("memory"):
        out["memory"] = float(options["memory"])  # a logical resource, as Ray's
    for k, v in (options.get("resources") or {}).items():
        out[k] = float(v)
    return out


request_of = _request_of


def host_class(kind, py_executable):
    """The troupe class name of a host kind (ActorHost, TaskHost); with a py_executable, an
    alias of it mapped to that interpreter (troupe.set_python_executable)."""
    name = f"{_HOST}.{kind}"
    if not py_executable or py_executable == sys.executable:
        return name
    import hashlib

    import troupe

    if not os.path.exists(py_executable):
        raise rex.RuntimeEnvSetupError(f"runtime_env py_executable {py_executable!r} does not "
                                       "exist")
    alias = f"{name}__py_{hashlib.sha1(py_executable.encode()).hexdigest()[:12]}"
    troupe.set_python_executable(alias, py_executable)
    return alias
