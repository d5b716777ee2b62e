"""The driver's resource ledger (until the head keeps it): what each node has free, where a
request fits under a scheduling strategy, and the placement groups reserved over the nodes.

ResourceLedger is a part of DriverRuntime (troupe.ray._runtime): its methods use the runtime's
`lock`, `nodes`, `pgs`, `pending`, `actors`, kill() and post_schedule(); callers hold no lock
unless a method says so.
"""

import warnings

from troupe.ray import _cells, _resources
from troupe.ray import exceptions as rex
from troupe.ray._placement import PlacementGroup
from troupe.ray._strategies import (NodeAffinitySchedulingStrategy,
                                    PlacementGroupSchedulingStrategy)


class PlacementGroupState:
    def __init__(self, pg_id, requests, strategy, name):
        self.pg_id = pg_id
        self.requests = requests
        self.strategy = strategy
        self.name = name
        self.bundles = None  # [Bundle] once placed
        self.ready_cell = _cells.Cell()
        self.removed = False

    def as_group(self):
        """The user's PlacementGroup of this state."""
        return PlacementGroup(self.pg_id, [dict(r) for r in self.requests], self.strategy,
                              self.name)


class ResourceLedger:
    # -- resources -----------------------------------------------------------------------
    def allocate(self, request, strategy):
        """(pool, node, gpus, bundle) for `request` under `strategy`, or None when it does not
        fit now. Raises PlacementGroupSchedulingError for a bad bundle index or a removed
        group."""
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
        pg = PlacementGroupState(_cells.new_id()[-18:], requests, strategy, name)
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
