"""``ray._private.state``: the global-state queries frameworks call (verl:
``state.placement_group_table(pg.id)``, ``available_resources_per_node()``)."""

from troupe.ray import _current


class GlobalState:
    """``ray._private.state.state``."""

    def placement_group_table(self, placement_group_id=None):
        """One group's record by id (bundles, bundles_to_node_id, strategy, state), or every
        group's keyed by id."""
        return _current.api().pg_table(str(placement_group_id)
                                       if placement_group_id is not None else None)

    def available_resources_per_node(self):
        return _current.api().available_resources_per_node()

    def total_resources_per_node(self):
        return {n["NodeID"]: dict(n["Resources"]) for n in _current.api().nodes() if n["Alive"]}


state = GlobalState()


def available_resources_per_node():
    """{node id: {resource: amount free}} over the alive nodes."""
    return state.available_resources_per_node()


def total_resources_per_node():
    """{node id: {resource: amount}} over the alive nodes."""
    return state.total_resources_per_node()
