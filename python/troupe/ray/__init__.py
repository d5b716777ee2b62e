"""troupe.ray: the subset of Ray's API that RL frameworks use, on troupe.

``from troupe import ray`` (or ``troupe.ray.install()`` then ``import ray``): a Ray actor is a
troupe worker hosting the class (troupe.ray._host.ActorHost), a task runs on a pooled troupe
worker of its node, an ObjectRef is a troupe future (or a value held by the driver), a
placement group reserves bundles in the driver's resource ledger over troupe's hosts. The
README's "Coming from Ray" section lists what is supported and what is refused; anything
outside that subset raises NotSupportedError (or TypeError for an unknown option) naming it.
"""

import atexit
import os
import sys
import time

from troupe.ray import _api, _context, _runtime
from troupe.ray import exceptions
from troupe.ray._objects import ObjectRef, ObjectRefGenerator
from troupe.ray.actor import ActorClass, ActorHandle, make_actor_class, method
from troupe.ray.remote_function import RemoteFunction

DynamicObjectRefGenerator = ObjectRefGenerator
_exit_hook_registered = False

# init() keywords that only tune Ray itself: accepted, and ignored (documented in the README).
_IGNORED_INIT = {"include_dashboard", "dashboard_host", "dashboard_port", "_temp_dir",
                 "configure_logging", "logging_level", "logging_format", "log_to_driver",
                 "_system_config", "object_store_memory", "_plasma_directory", "_memory",
                 "ignore_reinit_error", "_node_ip_address", "job_config", "storage",
                 "_enable_object_reconstruction", "_metrics_export_port", "_redis_password"}


def _standing_address():
    """(address, token file) of the cluster `troupe start` runs on this host, or None."""
    base = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"troupe-{os.getuid()}", "standing")
    try:
        with open(os.path.join(base, "head.address")) as f:
            return f.read().strip(), os.path.join(base, "token")
    except OSError:
        return None


def init(address=None, *, num_cpus=None, num_gpus=None, resources=None, runtime_env=None,
         namespace=None, local_mode=False, _num_nodes=1, **kwargs):
    """Starts an embedded troupe cluster (`_num_nodes` simulated hosts, each with `num_cpus`
    CPUs and `num_gpus` declared GPUs; `resources` are custom resources of the first host), or
    connects to a standing one: `address` "HOST:PORT", TROUPE_ADDRESS, or "auto" (TROUPE_ADDRESS,
    else the cluster `troupe start` runs on this host; ConnectionError when there is none).
    `runtime_env` (env_vars, py_executable) applies to every worker. Returns a context dict."""
    import troupe

    unknown = set(kwargs) - _IGNORED_INIT
    if unknown:
        raise TypeError(f"ray.init: unknown keyword arguments {sorted(unknown)}")
    if local_mode:
        raise exceptions.NotSupportedError("ray.init(local_mode=True) is not supported by "
                                           "troupe.ray: run the class directly for debugging")
    if _runtime.current() is not None:
        if kwargs.get("ignore_reinit_error"):
            return _runtime_info()
        raise RuntimeError("Maybe you called ray.init twice by accident? This error can be "
                           "suppressed by passing in 'ignore_reinit_error=True' or by calling "
                           "'ray.shutdown()' prior to 'ray.init()'.")
    if _context.in_worker():
        raise exceptions.NotSupportedError("ray.init inside a worker: the worker already uses "
                                           "its driver's cluster")
    from troupe.ray import _options

    _options.check_init_runtime_env(runtime_env)
    if address == "auto":
        address = os.environ.get("TROUPE_ADDRESS")
        if not address:
            found = _standing_address()
            if found is None:
                raise ConnectionError("Could not find any running troupe cluster (no "
                                      "TROUPE_ADDRESS, no `troupe start --head` on this host); "
                                      "call ray.init() without an address for an embedded one")
            address, token_file = found
            if "TROUPE_TOKEN" not in os.environ and os.path.exists(token_file):
                os.environ.setdefault("TROUPE_TOKEN_FILE", token_file)
    elif address in ("local", None):
        address = None if address == "local" else address
    if address and address.startswith("ray://"):
        raise exceptions.NotSupportedError("Ray Client (ray://) is not supported by troupe.ray: "
                                           "run the driver on the cluster with TROUPE_ADDRESS")
    env = dict((runtime_env or {}).get("env_vars") or {})
    python = (runtime_env or {}).get("py_executable")
    cluster = troupe.Cluster(
        num_hosts=int(_num_nodes), num_gpus_per_host=int(num_gpus or 0),
        num_cpus_per_host=float(num_cpus or 0), log_to_driver=kwargs.get("log_to_driver", True),
        python=python, address=address,
        # Actor and task hosts import troupe.ray: imported once by each host's fork server.
        python_preload=["troupe.ray._host"])
    rt = _runtime.DriverRuntime(cluster, True, namespace or f"anonymous-{os.getpid()}",
                                dict(runtime_env or {}, env_vars=env), "ray" in sys.modules and
                                sys.modules["ray"] is sys.modules[__name__], resources,
                                _address_towards(address or os.environ.get("TROUPE_ADDRESS")),
                                standing=bool(address or os.environ.get("TROUPE_ADDRESS")))
    _runtime.set_current(rt)
    global _exit_hook_registered
    if not _exit_hook_registered:  # as Ray's init does: a driver that never calls shutdown()
        atexit.register(shutdown, True)  # still stops its cluster before the interpreter ends
        _exit_hook_registered = True
    return _runtime_info()


def _address_towards(head):
    """This machine's address on the way to the head at `head` ("HOST:PORT"; None: an embedded
    cluster, on loopback): where workers on other hosts reach this driver. A UDP socket's
    connect sends nothing; it only picks the route."""
    if not head:
        return "127.0.0.1"
    import socket

    host = head.rsplit(":", 1)[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return s.getsockname()[0]


def _runtime_info():
    rt = _runtime.current()
    return {"node_ip_address": rt.nodes[0].address, "session_dir": rt.cluster.session_dir,
            "address": rt.nodes[0].address, "node_id": rt.nodes[0].node_id}


def is_initialized():
    """Whether init() ran in this driver (always True inside a worker)."""
    return _runtime.current() is not None or _context.in_worker()


def shutdown(_exiting_interpreter=False):
    """Stops every actor and task worker of this driver (and the embedded cluster)."""
    rt = _runtime.current()
    if rt is None:
        return
    _runtime.set_current(None)
    rt.shutdown()


def remote(*args, **options):
    """@ray.remote / @ray.remote(num_gpus=..., ...) on a function (a task) or a class (an
    actor)."""
    if len(args) == 1 and not options and callable(args[0]):
        return _make_remote(args[0], {})
    if args:
        raise TypeError("The @ray.remote decorator must be applied either with no arguments "
                        "or with keyword arguments only")
    return lambda target: _make_remote(target, options)


def _make_remote(target, options):
    if isinstance(target, type):
        return make_actor_class(target, options)
    return RemoteFunction(target, options)


def _refs_list(object_refs, what):
    def not_a_ref(obj):  # Ray's types: ValueError for get, TypeError for wait
        err = ValueError if what == "get" else TypeError
        return err(f"ray.{what}: expected an ObjectRef or a list of them, got "
                   f"{type(obj).__name__}")

    single = isinstance(object_refs, ObjectRef)
    if not single and not isinstance(object_refs, (list, tuple)):
        raise not_a_ref(object_refs)
    refs = [object_refs] if single else list(object_refs)
    for r in refs:
        if isinstance(r, ObjectRefGenerator):
            raise TypeError(f"ray.{what}: iterate the ObjectRefGenerator to get its ObjectRefs")
        if not isinstance(r, ObjectRef):
            raise not_a_ref(r)
    return single, refs


def get(object_refs, *, timeout=None):
    """The value of an ObjectRef (a list of values for a list); raises the task's error (a
    RayTaskError that is also the original type), RayActorError, or GetTimeoutError."""
    if type(object_refs) is ObjectRef and object_refs._cell is not None:
        return object_refs._result(timeout)  # one ref of this driver: no list, no lookup
    single, refs = _refs_list(object_refs, "get")
    values = _api.api().get(refs, timeout)
    return values[0] if single else values


def wait(object_refs, *, num_returns=1, timeout=None, fetch_local=True):
    """(ready, not_ready): the first `num_returns` refs that are done (in list order), once
    that many are or `timeout` seconds passed."""
    single, refs = _refs_list(object_refs, "wait")
    if single:
        raise TypeError("wait() expected a list of ray.ObjectRef, got a single ray.ObjectRef")
    if len(set(refs)) != len(refs):
        raise ValueError("Wait requires a list of unique object refs.")
    if not refs:
        return [], []
    if num_returns <= 0 or num_returns > len(refs):
        raise ValueError(f"Invalid number of objects to return {num_returns} for {len(refs)} "
                         "refs")
    return _api.api().wait(refs, num_returns, timeout)


def put(value, *, _owner=None):
    """An ObjectRef of `value` (passing it to many calls encodes it once per call; large
    buffers travel through the host's object store)."""
    if isinstance(value, ObjectRef):
        raise TypeError("Calling 'put' on an ray.ObjectRef is not allowed.")
    return _api.api().put(value)


def kill(actor, *, no_restart=True):
    """Kills the actor's process at once; with no_restart=False it restarts when max_restarts
    allows. Its pending calls fail with ActorDiedError."""
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ray.kill() only supported for actors. For tasks, try ray.cancel(). "
                         f"Got: {type(actor).__name__}.")
    _api.api().kill(actor._actor_id, no_restart)


def cancel(object_ref, *, force=False, recursive=True):
    raise exceptions.NotSupportedError("ray.cancel is not supported by troupe.ray: kill the "
                                       "actor (ray.kill) or let the task finish")


def get_actor(name, namespace=None):
    """The handle of the live actor named `name` in `namespace` (default: this job's);
    ValueError when there is none."""
    if not name:
        raise ValueError("Please supply a non-empty value to get_actor")
    return _api.api().get_actor(name, namespace)


def nodes():
    """One dict per node: NodeID, Alive, NodeManagerAddress, Resources, ..."""
    return _api.api().nodes()


def cluster_resources():
    return _api.api().cluster_resources()


def available_resources():
    return _api.api().available_resources()


def get_gpu_ids():
    """The GPU ids given to this actor or task (in the driver: [])."""
    return list(_context.get("gpu_ids") or [])


class RuntimeContext:
    """What ``ray.get_runtime_context()`` returns."""

    def get_node_id(self):
        rt = _runtime.current()
        if not _context.in_worker() and rt is not None:
            return rt.nodes[0].node_id
        return _context.get("node_id")

    def get_actor_id(self):
        return _context.get("actor_id")

    def get_job_id(self):
        rt = _runtime.current()
        return rt.job_id if rt is not None and not _context.in_worker() else _context.get("job_id")

    def get_placement_group_id(self):
        return _context.get("placement_group")

    def get_accelerator_ids(self):
        return {"GPU": [str(g) for g in get_gpu_ids()]}

    def get_assigned_resources(self):
        raise exceptions.NotSupportedError("get_assigned_resources: use ray.get_gpu_ids()")

    @property
    def namespace(self):
        rt = _runtime.current()
        return rt.namespace if rt is not None and not _context.in_worker() else \
            _context.get("namespace")

    node_id = property(get_node_id)
    job_id = property(get_job_id)
    actor_id = property(get_actor_id)


def get_runtime_context():
    return RuntimeContext()


def install():
    """Makes ``import ray`` (and ray.util, ray.util.placement_group,
    ray.util.scheduling_strategies, ray.util.state, ray.exceptions, ray.actor,
    ray.experimental.state.api, ray._private.services, ray._private.state) resolve to
    troupe.ray in this process and in the workers that troupe.ray starts afterwards."""
    import importlib

    from troupe.ray import _private, actor, experimental, remote_function, util
    from troupe.ray._private import services
    from troupe.ray._private import state as private_state
    from troupe.ray.experimental import state as experimental_state
    from troupe.ray.experimental.state import api as state_api
    from troupe.ray.util import state as util_state

    # ray.util.placement_group is both a function (an attribute of ray.util) and a module.
    placement_group = importlib.import_module("troupe.ray.util.placement_group")
    scheduling_strategies = importlib.import_module("troupe.ray.util.scheduling_strategies")
    me = sys.modules[__name__]
    for name, module in {"ray": me, "ray.util": util, "ray.exceptions": exceptions,
                         "ray.util.placement_group": placement_group,
                         "ray.util.scheduling_strategies": scheduling_strategies,
                         "ray.actor": actor, "ray.remote_function": remote_function,
                         "ray._private": _private, "ray._private.services": services,
                         "ray._private.state": private_state, "ray.experimental": experimental,
                         "ray.experimental.state": experimental_state,
                         "ray.experimental.state.api": state_api,
                         "ray.util.state": util_state}.items():
        sys.modules[name] = module
    rt = _runtime.current()
    if rt is not None:
        rt.install_as_ray = True


from troupe.ray import util  # noqa: E402 - after the names util imports from here

_ = time
__all__ = ["init", "shutdown", "is_initialized", "remote", "get", "wait", "put", "kill",
           "get_actor", "nodes", "cluster_resources", "available_resources", "get_gpu_ids",
           "get_runtime_context", "method", "install", "cancel", "ObjectRef",
           "ObjectRefGenerator", "ActorHandle", "ActorClass", "RemoteFunction", "exceptions",
           "util"]


def __getattr__(name):
    # ray.cloudpickle: the cloudpickle troupe.ray itself serializes with (Debian's
    # python3-cloudpickle), loaded on first use.
    if name == "cloudpickle":
        try:
            import cloudpickle
        except ImportError:
            raise AttributeError("ray.cloudpickle: cloudpickle is not installed (Debian: "
                                 "apt-get install python3-cloudpickle)") from None
        return cloudpickle
    raise AttributeError(f"module 'ray' (troupe.ray) has no attribute {name!r}")
