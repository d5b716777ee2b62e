"""Ray's placement groups (``ray.util.placement_group``): bundles of resources reserved on the
nodes, all or nothing, with PACK, SPREAD, STRICT_PACK or STRICT_SPREAD."""

from troupe.ray import _context, _current
from troupe.ray import exceptions as rex
from troupe.ray._placement import STRATEGIES, PlacementGroup


def placement_group(bundles, strategy="PACK", name="", lifetime=None,
                    _max_cpu_fraction_per_node=None, bundle_label_selector=None):
    """Reserves `bundles` (a list of {"CPU": c, "GPU": g, custom: n}) with `strategy`; returns
    at once (see PlacementGroup.ready)."""
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
    return _current.api().create_pg([{k: float(v) for k, v in b.items()} for b in bundles],
                                    strategy, name)


def remove_placement_group(placement_group):
    """Releases the group's bundles; actors in it are killed."""
    _current.api().remove_pg(placement_group.id)


def placement_group_table(placement_group=None):
    """One group's state (bundles, bundles_to_node_id, strategy, state), or every group's."""
    return _current.api().pg_table(placement_group.id if placement_group is not None else None)


def get_placement_group(placement_group_name):
    """The live placement group named `placement_group_name` (ValueError when there is none)."""
    return _current.api().get_pg(placement_group_name)


def get_current_placement_group():
    """The group this task or actor runs in, or None."""
    pg_id = _context.get("placement_group")
    return PlacementGroup(pg_id, []) if pg_id else None
