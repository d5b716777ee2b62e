"""``ray.util.scheduling_strategies``: where a task or actor runs (troupe.ray._strategies)."""

from troupe.ray._strategies import (NodeAffinitySchedulingStrategy, NodeLabelSchedulingStrategy,
                                    PlacementGroupSchedulingStrategy)

__all__ = ["PlacementGroupSchedulingStrategy", "NodeAffinitySchedulingStrategy",
           "NodeLabelSchedulingStrategy"]
