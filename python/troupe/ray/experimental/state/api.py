"""``ray.experimental.state.api`` (also ``ray.util.state``): the state queries frameworks use.
A record is Ray's (read as a dict or by attribute) for this job's actors and placement groups
only (the driver keeps them); None for an id it does not know."""

import operator

from troupe.ray import _current


class StateRecord(dict):
    """One entity's state: ``record["state"]``, ``record.get("state")`` or ``record.state``."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def asdict(self):
        return dict(self)


def _record(d):
    return StateRecord(d) if d is not None else None


def get_actor(id, address=None, timeout=None, _explain=False):  # noqa: A002 - Ray's name
    """The record of actor `id` (hex): actor_id, class_name, state (ALIVE, PENDING_CREATION,
    RESTARTING, DEAD), name, ray_namespace, node_id, pid, num_restarts, death_cause."""
    return _record(_current.api().actor_info(str(id)))


_PREDICATES = {"=": operator.eq, "!=": operator.ne}


def list_actors(address=None, filters=None, limit=100, timeout=None, detail=False,
                raise_on_missing_output=True, _explain=False):
    """The records of this job's actors (dead ones too), as get_actor gives them, at most
    `limit`; `filters` are Ray's (key, "=" or "!=", value) triples, values compared as text."""
    out = []
    for d in _current.api().list_actor_infos():
        keep = True
        for key, pred, value in filters or ():
            if pred not in _PREDICATES:
                raise ValueError(f"list_actors: unsupported filter predicate {pred!r} "
                                 f"(use '=' or '!=')")
            if key not in d:
                raise ValueError(f"list_actors: {key!r} is not an actor state column "
                                 f"(one of {sorted(d)})")
            keep = keep and _PREDICATES[pred](str(d[key]), str(value))
        if keep:
            out.append(StateRecord(d))
    return out[:limit]


def get_placement_group(id, address=None, timeout=None, _explain=False):  # noqa: A002
    """The record of placement group `id` (hex), as placement_group_table gives it."""
    try:
        return _record(_current.api().pg_table(str(id)))
    except ValueError:
        return None
