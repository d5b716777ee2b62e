"""WorkerBuilder and WorkerGroup: groups of workers with sharded dispatch."""

import importlib
import sys

from troupe import _core
from troupe._cluster import Worker, _encode_args, class_name_of
from troupe._errors import InvalidArgumentError
from troupe._futures import Future, MultiWorkerFuture, Stream
from troupe._virtual_cluster import NamedSharding


def _import_class(name):
    module, _, cls = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError):
        return None


def _as_lists(value, depth):
    """Turns the outer `depth` levels of nested sequences into lists (the shape the dispatch
    splits), leaving what is inside unchanged."""
    if depth <= 0 or not isinstance(value, (list, tuple)):
        return value
    return [_as_lists(v, depth - 1) for v in value]


class _Dispatch:
    """The dispatch methods shared by WorkerGroup and WorkerGroupSlice (self._g is the core
    object, self._cpp_class the C++ class name or None)."""

    def _args(self, method, args, kwargs):
        if args and self._cpp_class:
            raise InvalidArgumentError(
                f"method '{method}': C++ worker class {self._cpp_class} takes keyword arguments "
                f"only ({len(args)} positional given)")
        return _encode_args(args, kwargs)

    def run_single_worker_single_data(self, method_name, worker_idx, *args, **kwargs):
        """Calls `method_name` on worker `worker_idx`; returns a Future."""
        return Future(self._g.run_single_worker_single_data(
            method_name, worker_idx, self._args(method_name, args, kwargs)))

    def run_all_workers_multiple_data(self, method_name, *args, run_rank_0_only_axes=None,
                                      common_kwargs=None, **kwargs):
        """Calls every worker (only index 0 of each run_rank_0_only axis) with its own data:
        every positional or keyword data argument is a list with one element per called worker,
        in worker order; common_kwargs go to all of them. Returns a MultiWorkerFuture."""
        data = self._args(method_name, [_as_lists(a, 1) for a in args],
                            {k: _as_lists(v, 1) for k, v in kwargs.items()})
        return MultiWorkerFuture(self._g.run_all_workers_multiple_data(
            method_name, data, list(run_rank_0_only_axes or []), dict(common_kwargs or {})))

    def run_all_workers_single_data(self, method_name, *args, run_rank_0_only_axes=None,
                                    **kwargs):
        """Calls every worker (only index 0 of each run_rank_0_only axis) with the same
        arguments, encoded once (large buffers are sent as attachments, never copied per
        worker). Returns a MultiWorkerFuture."""
        return MultiWorkerFuture(self._g.run_all_workers_single_data(
            method_name, self._args(method_name, args, kwargs), list(run_rank_0_only_axes or [])))

    def run_all_workers_single_data_stream(self, method_name, *args, run_rank_0_only_axes=None,
                                           **kwargs):
        """As run_all_workers_single_data for a generator (stream) method; returns one
        troupe.Stream per called worker, in worker order."""
        return [Stream(s) for s in self._g.run_all_workers_single_data_stream(
            method_name, _encode_args(args, kwargs), list(run_rank_0_only_axes or []))]

    def run_all_workers_sharded_data(self, method_name, *args, in_sharded_axes=None,
                                     replicate_on_axes=None, output_is_replicated=None,
                                     make_dummy_calls_to_free_axes=False, common_kwargs=None,
                                     **kwargs):
        """Calls the workers with sharded data (the reference's semantics): every data argument
        is nested lists indexed by in_sharded_axes, in that order; along replicate_on_axes every
        worker gets the same data; on free axes only index 0 is called (the others too, with None
        data, when make_dummy_calls_to_free_axes); along output_is_replicated only index 0 is
        returned from. common_kwargs go unchanged to every called worker. Every argument is
        checked before any worker is called. Returns a MultiWorkerFuture."""
        depth = len(in_sharded_axes or [])
        data = self._args(method_name, [_as_lists(a, depth) for a in args],
                            {k: _as_lists(v, depth) for k, v in kwargs.items()})
        return MultiWorkerFuture(self._g.run_all_workers_sharded_data(
            method_name, data, list(in_sharded_axes or []), list(replicate_on_axes or []),
            list(output_is_replicated or []), bool(make_dummy_calls_to_free_axes),
            dict(common_kwargs or {})))

    def get_all_worker_results(self, future_bundle, return_generators_as_proxies=False,
                               timeout=None):
        """Blocks for the results of a MultiWorkerFuture: one per worker in its
        return_from_workers that was called, in that order. Raises the first failure."""
        return future_bundle.get_results(self, return_generators_as_proxies, timeout)

    def slice(self, **coords):
        """The workers at these mesh coordinates, e.g. ``group.slice(dp=1)``, as a
        WorkerGroupSlice: a mesh of the remaining axes with its own worker indices 0..n-1 (in
        group order), on which every dispatch method works; slicing a slice works too."""
        return WorkerGroupSlice(self._g.slice({str(k): int(v) for k, v in coords.items()}),
                                self._cpp_class)


class WorkerGroupSlice(_Dispatch):
    """A view of some workers of a WorkerGroup at fixed mesh coordinates (Monarch-style), made
    by ``WorkerGroup.slice(**coords)``. ``sharding`` covers the remaining axes and its ranks are
    the slice's own worker indices; MultiWorkerFuture indices are slice indices;
    ``group_worker_indices[i]`` is the group index of slice worker i. It keeps its group
    alive; calls after the group's shutdown fail."""

    def __init__(self, core, cpp_class):
        self._g = core
        self._cpp_class = cpp_class

    @property
    def sharding(self):
        """The slice's NamedSharding (the remaining axes)."""
        return NamedSharding._wrap(self._g.sharding())

    @property
    def group_worker_indices(self):
        """The group index of each slice worker."""
        return self._g.group_worker_indices()

    @property
    def workers(self):
        """The current handles of the slice's workers."""
        return [Worker(w) for w in self._g.workers()]

    def __len__(self):
        return len(self._g.group_worker_indices())

    def __repr__(self):
        return f"<troupe.WorkerGroupSlice of workers {self.group_worker_indices}>"


class WorkerBuilder:
    """What to start: a worker class and its constructor arguments (the reference's
    RayWorkerBuilder).

    ``WorkerBuilder("pkg.module.Class", *args, **kwargs)`` or ``WorkerBuilder(Class, ...)`` for
    a Python class (its worker is a Python process importing it by name); a name without a dot
    is a C++ class, mapped to its executable by ``Cluster(executables=...)``. A Python class's
    ``configure_worker(num_gpus, bundle_indices, num_gpus_per_node)`` classmethod, when the
    class is importable in the driver, is honoured as in the reference: it returns
    (resources, env_vars, init_kwargs, runtime_env_overrides) and its resources
    ({"num_gpus":, "num_cpus":}), environment and constructor arguments override the caller's.
    """

    def __init__(self, ray_actor_class_fqn, *args, **kwargs):
        self.class_name = class_name_of(ray_actor_class_fqn)
        self.worker_class = (ray_actor_class_fqn if not isinstance(ray_actor_class_fqn, str)
                             else None)
        self.args = args
        self.kwargs = kwargs
        self.num_cpus = None

    def _register(self):
        if "." not in self.class_name:
            return
        cls = self.worker_class or _import_class(self.class_name)
        configure = getattr(cls, "configure_worker", None) if cls is not None else None
        if configure is not None:
            _core.register_python_class(self.class_name, configure)

    def __repr__(self):
        return f"<troupe.WorkerBuilder {self.class_name}>"


class WorkerGroup(_Dispatch):
    """A group of workers, one per bundle of a VirtualCluster, addressed by a NamedSharding
    (the reference's RayWorkerGroup). Blocks until every worker is ready.

    Args:
        cluster: the troupe.VirtualCluster.
        remote_worker_builder: a troupe.WorkerBuilder.
        workers_per_node: None (one worker per bundle), an int for every node, or one per node.
        name_prefix: worker names are PREFIX-<index>.
        bundle_indices_list: tied groups [(placement group index, [bundle indices]), ...].
        sharding_annotations: a troupe.NamedSharding over the workers (default: one "dp" axis).
        env_vars: added to every worker's environment (over the driver's, copied now).
        dp_leader_worker_indices: an ascending subset of the tied-group leaders.
        dp_leaders_from_axis: instead, the lowest rank at each index of this axis leads.
        max_restarts: a dead worker is recreated by itself up to this many times.
        start_timeout: seconds to wait for the workers.

    Each worker sees RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (held free for it),
    NODE_RANK, AVAILABLE_ADDR_LIST, AVAILABLE_PORT_LIST, CUDA_VISIBLE_DEVICES and
    TROUPE_WORKER_GROUP. Dispatch methods return at once with futures; ``get_all_worker_results``
    gathers. Errors are troupe.TroupeError subclasses (e.g. WorkerDiedError naming the worker).
    """

    def __init__(self, cluster, remote_worker_builder, workers_per_node=None, name_prefix="",
                 bundle_indices_list=None, sharding_annotations=None, env_vars=None,
                 dp_leader_worker_indices=None, *, dp_leaders_from_axis=None, max_restarts=0,
                 show_progress=False, start_timeout=120.0):
        b = remote_worker_builder
        b._register()
        self._cpp_class = None if "." in b.class_name else b.class_name
        self.cluster = cluster
        self.sharding_annotations = sharding_annotations
        tied = None
        if bundle_indices_list is not None:
            tied = [(int(pg), [int(i) for i in idx]) for pg, idx in bundle_indices_list]
        self._g = _core.WorkerGroup(
            cluster._vc, b.class_name, _encode_args(b.args, b.kwargs), workers_per_node,
            name_prefix or "worker", tied,
            sharding_annotations._s if sharding_annotations is not None else None,
            {str(k): str(v) for k, v in (env_vars or {}).items()},
            list(dp_leader_worker_indices) if dp_leader_worker_indices is not None else None,
            dp_leaders_from_axis, max_restarts, show_progress, float(start_timeout), b.num_cpus)

    @property
    def workers(self):
        """The current worker handles (recreate_worker replaces entries)."""
        return [Worker(w) for w in self._g.workers()]

    @property
    def worker_metadata(self):
        """A snapshot, per worker: name, rank, node_idx, bundle_index, host, local_rank,
        dp_shard_idx, model_owner, bundle_indices, gpu_ids, num_cpus, num_gpus."""
        return self._g.worker_metadata()

    @property
    def dp_size(self):
        """The number of DP shards (DP leaders)."""
        return self._g.dp_size()

    @property
    def name(self):
        """The group's name."""
        return self._g.name()

    def get_dp_leader_worker_idx(self, dp_shard_idx):
        """The worker index of DP shard `dp_shard_idx`'s leader."""
        return self._g.get_dp_leader_worker_idx(dp_shard_idx)

    def recreate_worker(self, worker_idx, allow_replacement=False):
        """Rebuilds worker `worker_idx` in place (same bundle, environment and constructor
        arguments; a fresh name NAME-rN), killing the old process if still alive. Blocks until
        the new worker is ready; returns its Worker.

        When the worker's host is lost this raises HostLostError, unless `allow_replacement`:
        then the worker moves to another live host, in a new bundle with the same resources."""
        return Worker(self._g.recreate_worker(worker_idx, allow_replacement))

    def dump_stacks(self, file=sys.stderr):
        """The stacks of every worker, sampled through their hosts' agents (as ``troupe stack``
        does): per worker a dict with rank, name, host, pid, call (the method it runs, '' when
        idle), call_seconds, python (every Python thread's stack), native (every thread's native
        frames), errors (what could not be sampled, and why) and text (all of it, labelled).
        Prints the texts to `file` (None: does not print). Returns within a few seconds whatever
        the workers do."""
        dumps = self._g.dump_stacks()
        if file is not None:
            for d in dumps:
                file.write(d["text"])
            file.flush()
        return dumps

    def restarts(self, worker_idx):
        """How many times worker `worker_idx` was recreated."""
        return self._g.restarts(worker_idx)

    def shutdown(self, cleanup_method=None, timeout=30.0, force=False, grace=3.0):
        """Calls `cleanup_method` on every live worker (waiting at most `timeout` seconds), then
        SIGTERM to each worker, SIGKILL after `grace` seconds. Returns True when everything
        stopped cleanly. Idempotent."""
        clean, _problems = self._g.shutdown(cleanup_method or "", float(timeout or 1e9),
                                            force, float(grace))
        return clean

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
