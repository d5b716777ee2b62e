"""VirtualCluster (placement groups of bundles for worker groups) and NamedSharding (named axes
over worker ranks): the reference's RayVirtualCluster and NamedSharding over the core's."""

import os

from troupe import _core
from troupe._cluster import Cluster


class NamedSharding:
    """Names for the axes of an N-d layout of worker ranks (the reference's NamedSharding).

    ``NamedSharding([[0, 1], [2, 3]], ["dp", "tp"])``: rank r is worker r; dp index 0 holds
    ranks 0 and 1. Raises InvalidArgumentError for ragged layouts, duplicate names or ranks.
    """

    def __init__(self, layout, names):
        self._s = _core.NamedSharding(layout, list(names))

    @classmethod
    def _wrap(cls, core_sharding):
        s = cls.__new__(cls)
        s._s = core_sharding
        return s

    def __eq__(self, other):
        return isinstance(other, NamedSharding) and self._s == other._s

    names = property(lambda self: list(self._s.names), doc="The axis names, outermost first.")
    shape = property(lambda self: list(self._s.shape), doc="The size of each axis.")
    ndim = property(lambda self: self._s.ndim, doc="The number of axes.")
    size = property(lambda self: self._s.size, doc="The number of ranks.")

    def get_axis_index(self, name):
        """The position of axis `name`."""
        return self._s.get_axis_index(name)

    def get_axis_size(self, name):
        """The size of axis `name`."""
        return self._s.get_axis_size(name)

    def get_worker_coords(self, rank):
        """The coordinates of `rank`, one per axis."""
        return list(self._s.get_worker_coords(rank))

    def get_ranks_by_coord(self, **coords):
        """The ranks at these axis indices (e.g. dp=1), in layout order."""
        return list(self._s.get_ranks_by_coord(coords))

    def __repr__(self):
        return self._s.to_string()


class VirtualCluster:
    """Placement groups of resource bundles for worker groups (the reference's
    RayVirtualCluster).

    Args:
        bundle_ct_per_node_list: bundles wanted on each node, e.g. [2, 2]: one placement group
            per entry, on its own host.
        use_gpus: one GPU per bundle.
        num_gpus_per_node: GPUs per node.
        max_colocated_worker_groups: worker groups that may share these bundles.
        name: the name of its placement groups.
        cluster: the troupe.Cluster to place on. Default: an embedded Cluster with one host per
            entry of bundle_ct_per_node_list, each with num_gpus_per_node declared GPUs (when
            use_gpus) and enough CPUs; it is shut down with this VirtualCluster.
    """

    def __init__(self, bundle_ct_per_node_list, use_gpus=True, num_gpus_per_node=8,
                 max_colocated_worker_groups=1, name="", *, cluster=None,
                 use_unified_placement_group=False, cpus_per_bundle=1.0):
        self._owned = cluster is None
        if cluster is None:
            cpus = max([os.cpu_count() or 1] + [n * cpus_per_bundle * max_colocated_worker_groups
                                                for n in bundle_ct_per_node_list])
            cluster = Cluster(len(bundle_ct_per_node_list),
                              num_gpus_per_node if use_gpus else 0, cpus)
        self.cluster = cluster
        try:
            self._vc = _core.VirtualCluster(cluster._c, list(bundle_ct_per_node_list), use_gpus,
                                            num_gpus_per_node, max_colocated_worker_groups,
                                            name or "vc", use_unified_placement_group,
                                            float(cpus_per_bundle))
        except BaseException:
            if self._owned:
                cluster.shutdown()
            raise

    def world_size(self):
        """The number of bundles."""
        return self._vc.world_size()

    def node_count(self):
        """The number of distinct hosts the bundles are on."""
        return self._vc.node_count()

    def get_placement_groups(self):
        """Per placement group, its bundles (host, address, num_cpus, num_gpus, gpu_ids)."""
        return self._vc.placement_groups()

    def get_master_address_and_port(self):
        """(address, port) of the first bundle's host, with a port reserved there."""
        return self._vc.get_master_address_and_port()

    def shutdown(self):
        """Releases every reservation (and shuts the embedded Cluster down, if it made one)."""
        self._vc.shutdown()
        if self._owned:
            self.cluster.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
