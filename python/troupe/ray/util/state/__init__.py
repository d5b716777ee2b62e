"""``ray.util.state``: see troupe.ray.experimental.state.api."""

from troupe.ray.experimental.state.api import (StateRecord, get_actor, get_placement_group,
                                               list_actors)

__all__ = ["StateRecord", "get_actor", "get_placement_group", "list_actors"]
