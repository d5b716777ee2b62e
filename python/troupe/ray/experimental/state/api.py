"""``ray.experimental.state.api`` (also ``ray.util.state``): the state queries frameworks use.
A record is Ray's dict for the entity; this job's actors and placement groups only (the driver
keeps them), None for an id it does not know."""

from troupe.ray import _api


def get_actor(id, address=None, timeout=None, _explain=False):  # noqa: A002 - Ray's name
    """The record of actor `id` (hex): actor_id, class_name, state (ALIVE, PENDING_CREATION,
    RESTARTING, DEAD), name, ray_namespace, node_id, pid, num_restarts, death_cause."""
    return _api.api().actor_info(str(id))


def get_placement_group(id, address=None, timeout=None, _explain=False):  # noqa: A002
    """The record of placement group `id` (hex), as placement_group_table gives it."""
    try:
        return _api.api().pg_table(str(id))
    except ValueError:
        return None
