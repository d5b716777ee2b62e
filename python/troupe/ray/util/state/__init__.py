"""``ray.util.state``: see troupe.ray.experimental.state.api."""

from troupe.ray.experimental.state.api import get_actor, get_placement_group

__all__ = ["get_actor", "get_placement_group"]
