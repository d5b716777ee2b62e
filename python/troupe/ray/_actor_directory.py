"""The driver's actors: their creation (named or not, on this driver or, for a named actor on a
standing cluster, shared through the head: troupe.ray._named), start once resources are
allocated, death and restart, ray.kill, and their lifetime by the driver's handle count.

ActorDirectory is a part of DriverRuntime (troupe.ray._runtime): its methods use the runtime's
`lock`, `actors`, `named`, `handles`, `pending`, allocate(), post(), schedule() and
context_for(). handle_released runs inside __del__ on any thread: it only takes the lock and
posts.
"""

import troupe
from troupe.ray import _actors, _cells, _ledger, _named, _resources, _runtime_env, _serial
from troupe.ray import exceptions as rex
from troupe.ray._strategies import PlacementGroupSchedulingStrategy


class ActorDirectory:
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
        actor = _actors.ActorState(self, _cells.new_id()[-24:], spec, cls_name, methods,
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
        cls = _runtime_env.host_class("ActorHost",
                                      (opts.get("runtime_env") or {}).get("py_executable"))
        setup, wrapper = _runtime_env.launch(self, opts.get("runtime_env"), env,
                                             f"{actor.cls_name} runtime_env")
        extra.update(setup)
        worker = self.cluster.start_worker(
            cls, actor.spec, payload, buffers, self.context_for(node, gpus, extra),
            host=node.index, name=f"ray-{name}", env=env, gpus=gpus,
            detached=_named.is_detached(self, opts), launch_wrapper=wrapper)
        actor.started(worker)
        if _named.is_detached(self, opts) and isinstance(pool, _ledger.HeadBooking):
            # The cluster's, not this driver's: its resources stay booked after the driver exits
            # and go with its worker.
            booking = pool
            worker.ready().add_done_callback(
                lambda f: f.exception() is None and self.post(lambda: self._tie(booking, worker)))
        if actor.name and self.standing:
            worker.ready().add_done_callback(
                lambda f: f.exception() is None and self.post(
                    lambda: _named.publish(self, actor, worker)))
        worker.died().add_done_callback(
            lambda f: self.post(lambda: self._actor_died(actor, worker, f)))

    def _tie(self, booking, worker):
        try:
            self.cluster.tie_booking(booking.booking_id, worker)
        except troupe.TroupeError:
            pass  # released already: the actor died first

    def _actor_died(self, actor, worker, died_future):
        forget = None
        with self.lock:
            if actor.worker is not worker and actor.dead is None and actor.worker is not None:
                return  # an earlier incarnation
            if actor.allocation is not None:
                pool, _, gpus, _ = actor.allocation
                pool.give(_resources.request_of(actor.options, actor=True), gpus)
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
                    for p in self.pending:
                        if getattr(p, "actor", None) is actor and p.booking_id:
                            self.cluster.unbook(p.booking_id)  # no longer waiting at the head
                    self.pending = [p for p in self.pending
                                    if getattr(p, "actor", None) is not actor]
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


class _ActorStart:
    """A pending actor creation."""

    def __init__(self, actor):
        self.actor = actor
        self.booking_id = None  # one id for every attempt: unbooking it ends its waiting

    def try_place(self, runtime):
        if self.actor.dead is not None:
            if self.booking_id:
                runtime.cluster.unbook(self.booking_id)
            return True
        if self.booking_id is None:
            self.booking_id = runtime.new_booking_id("actor")
        what = self.actor.name or self.actor.actor_id[:12]
        alloc = runtime.allocate(_resources.request_of(self.actor.options, actor=True),
                                 self.actor.options.get("scheduling_strategy"), self.booking_id,
                                 f"actor {self.actor.cls_name} {what}")
        if alloc is None:
            return False
        runtime.start_actor(self.actor, alloc)
        return True

    def fail(self, error):
        self.actor.mark_dead(rex.ActorDiedError(self.actor.actor_id, f"could not be scheduled: "
                                                f"{error}"))
