"""Ray's scheduling strategies (re-exported as ``ray.util.scheduling_strategies``)."""

from troupe.ray.exceptions import NotSupportedError


class PlacementGroupSchedulingStrategy:
    """Run in a bundle of `placement_group` (index -1: any bundle with room); with
    `placement_group_capture_child_tasks`, tasks and actors created inside go there too."""

    def __init__(self, placement_group, placement_group_bundle_index=-1,
                 placement_group_capture_child_tasks=None):
        self.placement_group = placement_group
        self.placement_group_bundle_index = int(placement_group_bundle_index)
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks

    def __repr__(self):
        return (f"PlacementGroupSchedulingStrategy({self.placement_group!r}, "
                f"{self.placement_group_bundle_index})")


class NodeAffinitySchedulingStrategy:
    """Run on node `node_id` (``ray.nodes()[i]["NodeID"]``); with `soft`, elsewhere when that
    node has no room or is gone."""

    def __init__(self, node_id, soft, _spill_on_unavailable=False, _fail_on_unavailable=False):
        self.node_id = node_id
        self.soft = bool(soft)


class NodeLabelSchedulingStrategy:
    def __init__(self, *args, **kwargs):
        raise NotSupportedError("NodeLabelSchedulingStrategy is not supported by troupe.ray: "
                                "use NodeAffinitySchedulingStrategy or custom resources")
