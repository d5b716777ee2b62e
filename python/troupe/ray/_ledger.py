"""The driver's side of the head's resource book: where a request fits under a scheduling
strategy, and the placement groups this driver reserved.

The head books every node-level reservation of every driver (actors and tasks outside a
placement group, placement groups' bundles: troupe.Cluster.try_book), so drivers sharing a
standing cluster never hand out the same resources; a request that does not fit waits here and
is tried again when the head says resources were freed. What an actor or task takes from a
placement group's bundle is this driver's own (the bundle's pool).

ResourceLedger is a part of DriverRuntime (troupe.ray._runtime): its methods use the runtime's
`lock`, `cluster`, `nodes`, `pgs`, `pending`, `actors`, kill() and post_schedule(); callers hold
no lock unless a method says so.
"""

import itertools
import warnings

import troupe
from troupe.ray import _cells, _resources
from troupe.ray import exceptions as rex
from troupe.ray._placement import PlacementGroup
from troupe.ray._strategies import (NodeAffinitySchedulingStrategy,
                                    PlacementGroupSchedulingStrategy)

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_booking_ids = itertools.count()


class PlacementGroupState:
    def __init__(self, pg_id, requests, strategy, name):
        self.pg_id = pg_id
        self.requests = requests
        self.strategy = strategy
        self.name = name
        self.bundles = None  # [Bundle] once placed
        self.ready_cell = _cells.Cell()
        self.removed = False

    @property
    def booking_id(self):
        return f"ray-pg-{self.pg_id}"

    def as_group(self):
        """The user's PlacementGroup of this state."""
        return PlacementGroup(self.pg_id, [dict(r) for r in self.requests], self.strategy,
                              self.name)


class HeadBooking:
    """What one actor or task holds at the head outside a placement group: the `pool` of its
    allocation, with a Pool's give and take_over."""

    def __init__(self, cluster, booking_id, host, share):
        self.cluster = cluster
        self.booking_id = booking_id
        self.host = host
        self.share = share

    def give(self, request, gpus):
        try:
            self.cluster.unbook(self.booking_id)
        except troupe.TroupeError:
            pass  # the head is gone: a restarted one releases what no driver books again

    def take_over(self, request, gpus):
        """Books it again where it was, even over the host's amounts (a task back from a nested
        ray.get, as Ray's raylet does)."""
        try:
            self.cluster.book_at(self.booking_id, [request],
                                 [(self.host, list(gpus), self.share)], True)
        except troupe.TroupeError:
            pass  # the head is gone: the task runs on, unbooked until it ends


class ResourceLedger:
    def new_booking_id(self, what):
        return f"ray-{self.job_id}-{what}-{next(_booking_ids)}"

    # -- resources -----------------------------------------------------------------------
    def allocate(self, request, strategy, booking_id=None, waiting_as=""):
        """(pool, node, gpus, bundle) for `request` under `strategy`, or None when it does not
        fit now (then, with `waiting_as`, the head lists it as waiting and this runtime
        schedules again when resources are freed). Raises PlacementGroupSchedulingError for a
        bad bundle index or a removed group."""
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
        if isinstance(strategy, NodeAffinitySchedulingStrategy):
            target = [n for n in self.nodes if n.node_id == strategy.node_id]
            if not target and not strategy.soft:
                raise rex.TaskUnschedulableError(
                    f"NodeAffinitySchedulingStrategy: node {strategy.node_id} is not alive")
            tries = [("PACK", target[0].index)] if target else []
            if strategy.soft:
                tries.append(("PACK", None))
        elif strategy == "SPREAD":
            tries = [("SPREAD", None)]
        else:
            tries = [("PACK", None)]
        booking_id = booking_id or self.new_booking_id("r")
        for i, (how, host) in enumerate(tries):
            try:
                got = self.cluster.try_book(booking_id, [request], how, host,
                                            waiting_as if i == len(tries) - 1 else "")
            except troupe.ConnectionLostError:
                return None  # the head is gone: tried again once the driver is back with it
            if got is not None:
                where, gpus, share = got[0]
                return (HeadBooking(self.cluster, booking_id, where, share),
                        self.node_at[where], list(gpus), None)
        key = tuple(sorted(request.items()))
        if key not in self.checked_feasible:
            self.checked_feasible.add(key)
            if not _resources.feasible_somewhere(self.cluster.host_resources(), request):
                warnings.warn(f"troupe.ray: no node can ever hold {request}; it waits until one "
                              "joins", stacklevel=2)
        return None

    # -- placement groups ----------------------------------------------------------------
    def create_pg(self, requests, strategy, name):
        if strategy not in STRATEGIES:
            raise ValueError(f"placement strategy {strategy!r}: use PACK, SPREAD, STRICT_PACK "
                             "or STRICT_SPREAD")
        pg = PlacementGroupState(_cells.new_id()[-18:], requests, strategy, name)
        with self.lock:
            self.pgs[pg.pg_id] = pg
            if not self._try_place_pg(pg):
                self.pending.append(pg)
        return pg

    def _try_place_pg(self, pg):
        if pg.removed:
            return True
        try:
            got = self.cluster.try_book(pg.booking_id, pg.requests, pg.strategy, None,
                                        f"placement group {pg.name or pg.pg_id}")
        except troupe.ConnectionLostError:
            return False  # the head is gone: tried again once the driver is back with it
        except troupe.TroupeError as e:  # a request the head refuses: the group never fits
            pg.ready_cell.set_error(rex.PlacementGroupSchedulingError(
                f"placement group {pg.pg_id}: {e}"))
            return True
        if got is None:
            return False
        pg.bundles = [_resources.Bundle(i, r, self.node_at[host], list(gpus))
                      for i, (r, (host, gpus, _share)) in enumerate(zip(pg.requests, got))]
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
            self.cluster.unbook(pg.booking_id)  # placed or waiting: the head forgets it
            pg.ready_cell.set_error(rex.PlacementGroupSchedulingError(
                f"placement group {pg_id} was removed"))
        self.post_schedule()
