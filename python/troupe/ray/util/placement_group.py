"""Ray's placement groups (``ray.util.placement_group``): bundles of resources reserved on the
nodes, all or nothing, with PACK, SPREAD, STRICT_PACK or STRICT_SPREAD."""

from troupe.ray import _ids
from troupe.ray import exceptions as rex

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class PlacementGroup:
    """A placement group: ``ready()`` is an ObjectRef that resolves once every bundle is
    reserved; ``wait(timeout)`` blocks for it. Picklable (it can be passed to actors)."""

    def __init__(self, pg_id, bundles, strategy="PACK", name=""):
        self.id = _ids.PlacementGroupID(pg_id)
        self._bundles = bundles
        self.strategy = strategy
        self.name = name

    @property
    def bundle_specs(self):
        """The bundles as asked, e.g. [{"CPU": 1, "GPU": 1}, ...]."""
        return [dict(b) for b in self._bundles]

    @property
    def bundle_count(self):
        return len(self._bundles)

    def ready(self):
        from troupe.ray import _api

        return _api.api().pg_ready(self.id)

    def wait(self, timeout_seconds=30):
        """Whether the group is placed within `timeout_seconds`."""
        from troupe.ray import _api

        ref = self.ready()
        ready, _ = _api.api().wait([ref], 1, timeout_seconds)
        return bool(ready)

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"PlacementGroup(id={self.id}, bundles={self._bundles}, strategy={self.strategy})"


def placement_group(bundles, strategy="PACK", name="", lifetime=None, _max_cpu_fraction_per_node=None,
                    bundle_label_selector=None):
    """Reserves `bundles` (a list of {"CPU": c, "GPU": g, custom: n}) with `strategy`; returns
    at once (see PlacementGroup.ready)."""
    from troupe.ray import _api

    if strategy not in STRATEGIES:
        raise ValueError(f"Invalid placement group strategy {strategy!r}: use one of "
                         f"{', '.join(STRATEGIES)}")
    if not bundles or not all(isinstance(b, dict) for b in bundles):
        raise ValueError("bundles must be a non-empty list of resource dicts")
    for b in bundles:
        if not b or all(v == 0 for v in b.values()):
            raise ValueError(f"Bundles cannot be empty or all zero: {b}")
        if any(v < 0 for v in b.values()):
            raise ValueError(f"Bundle resources must be non-negative: {b}")
    if bundle_label_selector:
        raise rex.NotSupportedError("bundle_label_selector is not supported by troupe.ray: use "
                                    "custom resources in the bundles")
    if lifetime not in (None, "detached"):
        raise ValueError("lifetime must be None or 'detached'")
    return _api.api().create_pg([{k: float(v) for k, v in b.items()} for b in bundles],
                                strategy, name)


def remove_placement_group(placement_group):
    """Releases the group's bundles; actors in it are killed."""
    from troupe.ray import _api

    _api.api().remove_pg(placement_group.id)


def placement_group_table(placement_group=None):
    """One group's state (bundles, bundles_to_node_id, strategy, state), or every group's."""
    from troupe.ray import _api

    return _api.api().pg_table(placement_group.id if placement_group is not None else None)


def get_placement_group(placement_group_name):
    """The live placement group named `placement_group_name` (ValueError when there is none)."""
    from troupe.ray import _api

    return _api.api().get_pg(placement_group_name)


def get_current_placement_group():
    """The group this task or actor runs in, or None."""
    from troupe.ray import _context

    pg_id = _context.get("placement_group")
    return PlacementGroup(pg_id, []) if pg_id else None
