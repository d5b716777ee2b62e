"""troupe: drive groups of worker processes from one Python (or C++) controller.

Quick start::

    import troupe

    class Adder:                          # in an importable module, e.g. mypkg/workers.py
        def __init__(self, base): self.base = base
        def add(self, a, b): return self.base + a + b

    vc = troupe.VirtualCluster(bundle_ct_per_node_list=[2, 2], use_gpus=False)
    group = troupe.WorkerGroup(vc, troupe.WorkerBuilder("mypkg.workers.Adder", base=10),
                               sharding_annotations=troupe.NamedSharding([[0, 1], [2, 3]],
                                                                         ["dp", "tp"]))
    f = group.run_all_workers_sharded_data("add", a=[1, 2], b=5, in_sharded_axes=["dp"],
                                           replicate_on_axes=["tp"], output_is_replicated=["tp"])
    group.get_all_worker_results(f)       # [16, 17]: one result per dp shard
    group.shutdown(); vc.shutdown()

Names follow the reference design (RayVirtualCluster, RayWorkerBuilder, RayWorkerGroup without
the "Ray"). Values: None, bool, int, float, str, list, tuple and dict travel natively; bytes,
bytearray, memoryview, NumPy arrays and CPU torch tensors as raw attachments (arriving as NumPy
arrays / tensors backed by the received buffer); anything else is pickled.
"""

from troupe import _core
from troupe._cluster import Cluster, Worker, set_python_executable
from troupe._errors import (
    ConnectionLostError,
    ConstructorFailedError,
    ExecutableNotFoundError,
    HostLostError,
    InternalError,
    InvalidArgumentError,
    MethodFailedError,
    OutOfMemoryError,
    ProtocolError,
    ResourceUnavailableError,
    ShutdownError,
    TimeoutError,
    TroupeError,
    UnauthenticatedError,
    UnknownClassError,
    UnknownMethodError,
    WorkerDiedError,
)
from troupe._futures import Future, MultiWorkerFuture, Stream, gather
from troupe._group import WorkerBuilder, WorkerGroup, WorkerGroupSlice
from troupe._virtual_cluster import NamedSharding, VirtualCluster

__version__ = _core.version()

__all__ = [
    "Cluster", "VirtualCluster", "NamedSharding", "Worker", "WorkerBuilder", "WorkerGroup", "WorkerGroupSlice",
    "Future", "MultiWorkerFuture", "Stream", "gather", "set_python_executable",
    "TroupeError", "InvalidArgumentError", "UnknownClassError", "UnknownMethodError",
    "MethodFailedError", "ConstructorFailedError", "WorkerDiedError", "ConnectionLostError",
    "TimeoutError", "ProtocolError", "UnauthenticatedError", "ExecutableNotFoundError",
    "ResourceUnavailableError", "ShutdownError", "HostLostError", "InternalError",
    "OutOfMemoryError",
]
