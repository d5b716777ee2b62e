"""``ray.util`` on troupe: placement groups, scheduling strategies, get_node_ip_address."""

import importlib

from troupe.ray import _context, _current
from troupe.ray.exceptions import NotSupportedError
from troupe.ray.util.placement_group import (PlacementGroup, get_current_placement_group,
                                             get_placement_group, placement_group,
                                             placement_group_table, remove_placement_group)
from troupe.ray.util.actor_pool import ActorPool
from troupe.ray.util import scheduling_strategies


def get_node_ip_address():
    """The address of the host this code runs on (127.0.0.x for a simulated host)."""
    rt = _current.runtime()
    if not _context.in_worker() and rt is not None:
        return rt.nodes[0].address
    return _context.node_ip()


def list_named_actors(all_namespaces=False):
    """The names of the live named actors of this job's namespace (with all_namespaces, dicts
    {"name", "namespace"} of every namespace's), as Ray's."""
    return _current.api().list_named_actors(bool(all_namespaces))


def __getattr__(name):
    if name == "queue":
        return importlib.import_module("troupe.ray.util.queue")  # as Ray's: on first use
    if name in ("collective", "multiprocessing", "dask", "joblib"):
        raise NotSupportedError(f"ray.util.{name} is not supported by troupe.ray (for "
                                "collectives use torch.distributed in the workers)")
    raise AttributeError(f"module 'ray.util' has no attribute {name!r}")


__all__ = ["PlacementGroup", "placement_group", "placement_group_table",
           "remove_placement_group", "get_current_placement_group", "get_node_ip_address",
           "get_placement_group", "ActorPool", "list_named_actors",
           "scheduling_strategies"]
