"""The operations behind troupe.ray's public functions, in two implementations: DriverApi (the
driver's runtime does them) and WorkerApi (inside a worker: each goes to the driver over the
control socket, troupe.ray._proxy). Both take and return ObjectRefs, ActorHandles and
PlacementGroups."""

import itertools
import threading
import time

from troupe.ray import _cells, _context, _objects, _proxy
from troupe.ray import exceptions as rex
from troupe.ray._handles import ActorHandle
from troupe.ray._placement import PlacementGroup
from troupe.ray._strategies import PlacementGroupSchedulingStrategy


def _handle(actor):
    return ActorHandle(actor.actor_id, actor.methods, actor.cls_name)


class DriverApi:
    def __init__(self, runtime):
        self.rt = runtime

    def create_actor(self, spec, cls_name, methods, options, args, kwargs):
        return _handle(self.rt.create_actor(spec, cls_name, methods, options, args, kwargs))

    def _actor(self, actor_id):
        actor = self.rt.actors.get(actor_id)
        if actor is None:
            raise rex.RayActorError(actor_id, f"no actor {actor_id} in this job")
        return actor

    def call_actor(self, actor_id, method, args, kwargs, num_returns, group=None, retry=None):
        return self._actor(actor_id).submit(method, args, kwargs, num_returns, group, retry)

    def submit_task(self, spec, fn_name, options, args, kwargs):
        return self.rt.submit_task(spec, fn_name, options, args, kwargs)

    def get(self, refs, timeout, task_key=None):
        if task_key is not None:
            with self.rt.tasks.blocked(task_key, refs):
                return self.get(refs, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        out = []
        for r in refs:
            if r._cell is None:
                raise rex.ObjectLostError(r.hex(), f"object {r.hex()} is unknown to this driver")
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            out.append(r._result(left))
        return out

    def wait(self, refs, num_returns, timeout, task_key=None):
        if task_key is not None and timeout != 0:
            with self.rt.tasks.blocked(task_key, refs):
                return self.wait(refs, num_returns, timeout)

        for r in refs:
            if r._cell is None:
                raise rex.ObjectLostError(r.hex(), f"object {r.hex()} is unknown to this driver")
        ready = _first_done(refs, num_returns)
        if len(ready) < num_returns and timeout != 0:
            wake = threading.Event()
            pending = [r for r in refs if not r._done()]
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                for r in pending:
                    r._cell.add_waiter(wake)
                while True:
                    ready = _first_done(refs, num_returns)
                    if len(ready) >= num_returns:
                        break
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    wake.wait(left)
                    wake.clear()
            finally:
                for r in pending:
                    r._cell.remove_waiter(wake)
        chosen = set(map(id, ready))
        return ready, [r for r in refs if id(r) not in chosen]

    def put(self, value):
        snapshot, stored = _objects.put_value(self.rt.cluster, value)
        return _objects.ObjectRef(_cells.new_id(), _cells.Cell.of_value(snapshot), stored=stored)

    def kill(self, actor_id, no_restart):
        self.rt.kill(actor_id, no_restart)

    def cancel(self, ref, force):
        if ref._cell is None:
            raise rex.ObjectLostError(ref.hex(), f"object {ref.hex()} is unknown to this driver")
        self.rt.tasks.cancel(ref, force)

    def get_actor(self, name, namespace):
        return _handle(self.rt.get_actor(name, namespace))

    def generator_next(self, gen_id, timeout):
        """The next ref of a generator passed to a worker; StopIteration at its end."""
        gen = self.rt.generators.get(gen_id)
        if gen is None:
            raise rex.ObjectLostError(gen_id, f"no ObjectRefGenerator {gen_id} in this job")
        return gen._next(timeout)

    def create_pg(self, bundles, strategy, name):
        return self.rt.create_pg(bundles, strategy, name).as_group()

    def _pg_state(self, pg_id):
        state = self.rt.pgs.get(pg_id)
        if state is None:
            raise ValueError(f"no placement group {pg_id} in this job")
        return state

    def pg_ready(self, pg_id):
        return _objects.ObjectRef(f"pg-ready-{pg_id}", self._pg_state(pg_id).ready_cell)

    def remove_pg(self, pg_id):
        self._pg_state(pg_id)
        self.rt.remove_pg(pg_id)

    def get_pg(self, name):
        with self.rt.lock:
            for s in self.rt.pgs.values():
                if s.name == name and not s.removed:
                    return s.as_group()
        raise ValueError(f"Failed to look up placement group with name: {name}")

    def list_named_actors(self, all_namespaces):
        if self.rt.standing:  # every driver's, detached ones whose driver left too: the head's
            alive = [(r["ns"], r["name"]) for r in self.rt.cluster.list_names()]
        else:
            with self.rt.lock:
                alive = [(ns, name) for (ns, name), aid in self.rt.named.items()
                         if aid in self.rt.actors and self.rt.actors[aid].dead is None]
        if all_namespaces:
            return [{"name": name, "namespace": ns} for ns, name in alive]
        return [name for ns, name in alive if ns == self.rt.namespace]

    def actor_info(self, actor_id):
        """Ray's state-API record of one of this job's actors (state ALIVE, PENDING_CREATION,
        RESTARTING or DEAD), or None for an actor id this driver did not create."""
        actor = self.rt.actors.get(str(actor_id))
        if actor is None:
            return None
        with actor.lock:
            worker, dead, node = actor.worker, actor.dead, actor.node
            if dead is not None:
                state = "DEAD"
            elif worker is None:
                state = "RESTARTING" if actor.incarnation > 1 else "PENDING_CREATION"
            else:
                state = "ALIVE"
        return {"actor_id": actor.actor_id, "class_name": actor.cls_name.rsplit(".", 1)[-1],
                "state": state, "name": actor.name or "",
                "ray_namespace": actor.namespace or self.rt.namespace,
                "node_id": getattr(node, "node_id", None),
                "pid": worker.pid if worker is not None else None,
                "num_restarts": max(actor.incarnation - 1, 0),
                "death_cause": str(dead) if dead is not None else None}

    def list_actor_infos(self):
        """actor_info of every actor this driver created, in creation order (dead ones too)."""
        return [self.actor_info(a) for a in list(self.rt.actors)]

    def _hosts(self):
        """(Node, the head's record of it) of every host: what it has and has free, every
        driver's bookings counted."""
        return [(self.rt.node_at[h["index"]], h) for h in self.rt.cluster.host_resources()
                if h["index"] in self.rt.node_at]

    def available_resources_per_node(self):
        return {n.node_id: {k: v for k, v in h["free"].items() if v > 1e-9}
                for n, h in self._hosts() if h["alive"]}

    def pg_table(self, pg_id):
        with self.rt.lock:
            if pg_id is not None:
                return _pg_entry(self._pg_state(pg_id))
            return {s.pg_id: _pg_entry(s) for s in self.rt.pgs.values()}

    def nodes(self):
        return [{"NodeID": n.node_id, "Alive": h["alive"], "NodeManagerAddress": n.address,
                 "NodeManagerHostname": n.name, "NodeName": n.address,
                 "Resources": {k: v for k, v in h["total"].items() if v > 1e-9},
                 "alive": h["alive"]} for n, h in self._hosts()]

    def cluster_resources(self):
        hosts = self._hosts()
        with self.rt.lock:
            groups = _group_resources(self.rt.pgs.values(), "total")
        out = _sum([h["total"] for _, h in hosts if h["alive"]] + groups)
        return {k: v for k, v in out.items() if v > 1e-9}

    def available_resources(self):
        hosts = self._hosts()
        with self.rt.lock:
            groups = _group_resources(self.rt.pgs.values(), "avail")
        out = _sum([h["free"] for _, h in hosts if h["alive"]] + groups)
        return {k: v for k, v in out.items() if v > 1e-9}


def _first_done(refs, n):
    """The first `n` refs of `refs` that are done, in list order (fewer if fewer are)."""
    return list(itertools.islice((r for r in refs if r._done()), n))


def _group_resources(pgs, which):
    """Ray's resources of the placed groups, from each bundle's pool (`which`: "total" or
    "avail"): R_group_<i>_<id> per bundle, R_group_<id> per group, and bundle_group_<i>_<id>,
    bundle_group_<id> (1000 per bundle, as Ray's)."""
    out = []
    for pg in pgs:
        if pg.removed or pg.bundles is None:
            continue
        for b in pg.bundles:
            amounts = getattr(b.pool, which)
            per_bundle = {f"{k}_group_{b.index}_{pg.pg_id}": v for k, v in amounts.items()}
            per_bundle.update({f"{k}_group_{pg.pg_id}": v for k, v in amounts.items()})
            per_bundle[f"bundle_group_{b.index}_{pg.pg_id}"] = 1000.0
            per_bundle[f"bundle_group_{pg.pg_id}"] = 1000.0
            out.append(per_bundle)
    return out


def _sum(dicts):
    out = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _pg_entry(s):
    state = "REMOVED" if s.removed else ("CREATED" if s.bundles is not None else "PENDING")
    return {"placement_group_id": s.pg_id, "name": s.name or "", "strategy": s.strategy,
            "state": state, "bundles": {i: dict(r) for i, r in enumerate(s.requests)},
            "bundles_to_node_id": ({b.index: b.node.node_id for b in s.bundles}
                                   if s.bundles is not None else {})}


class WorkerApi:
    """Inside a worker: each operation is done by the driver."""

    def __getattr__(self, op):
        if op not in _proxy.OPS:
            raise AttributeError(op)

        def call(*args):
            if op in ("create_actor", "submit_task"):
                args = _with_captured_group(op, args)
            elif op in ("get", "wait") and _context.get("task_key") is not None:
                args = args + (_context.get("task_key"),)  # a task: its CPU is freed meanwhile
            if op == "wait":  # answered with the indices of the ready refs
                refs = args[0]
                ready = set(_proxy.client().request(op, *args))
                return ([r for i, r in enumerate(refs) if i in ready],
                        [r for i, r in enumerate(refs) if i not in ready])
            return _proxy.client().request(op, *args)

        return call


def _with_captured_group(op, args):
    """A task or actor made inside a placement-group worker that captures child tasks goes into
    that group, unless it names its own strategy ("DEFAULT" too: Ray's way to escape)."""
    pg_id = _context.get("placement_group")
    if not pg_id or not _context.get("capture_child_tasks"):
        return args
    args = list(args)
    i = 3 if op == "create_actor" else 2
    options = dict(args[i])
    if options.get("scheduling_strategy") is None:
        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            PlacementGroup(pg_id, [], "", ""), -1, True)
    args[i] = options
    return tuple(args)
