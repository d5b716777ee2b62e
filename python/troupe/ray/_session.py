"""The driver's session: ray.init (an embedded cluster, or a standing one), shutdown, and what
the running code learns about itself (get_runtime_context, get_gpu_ids). Provides this process's
API to troupe.ray._current: in a worker the driver's (over the proxy), in a driver its own,
initializing it on first use as Ray does."""

import atexit
import os
import socket
import sys

import troupe
from troupe.ray import _api, _context, _current, _options, _resources, _runtime
from troupe.ray import exceptions

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
         namespace=None, local_mode=False, _num_nodes=1, _prestart_task_workers=None, **kwargs):
    """Starts an embedded troupe cluster (`_num_nodes` simulated hosts, each with `num_cpus`
    CPUs and `num_gpus` declared GPUs; `resources` are custom resources of the first host), or
    connects to a standing one: `address` "HOST:PORT", TROUPE_ADDRESS, or "auto" (TROUPE_ADDRESS,
    else the cluster `troupe start` runs on this host; ConnectionError when there is none).
    `runtime_env` (env_vars, py_executable) applies to every worker. `_prestart_task_workers`
    task workers are started on every node at once (default: TROUPE_RAY_PRESTART_TASK_WORKERS,
    else 1), so that the first task does not wait for a process to start. Returns a context
    dict."""
    unknown = set(kwargs) - _IGNORED_INIT
    if unknown:
        raise TypeError(f"ray.init: unknown keyword arguments {sorted(unknown)}")
    if local_mode:
        raise exceptions.NotSupportedError("ray.init(local_mode=True) is not supported by "
                                           "troupe.ray: run the class directly for debugging")
    if _current.runtime() is not None:
        if kwargs.get("ignore_reinit_error"):
            return _runtime_info()
        raise RuntimeError("Maybe you called ray.init twice by accident? This error can be "
                           "suppressed by passing in 'ignore_reinit_error=True' or by calling "
                           "'ray.shutdown()' prior to 'ray.init()'.")
    if _context.in_worker():
        raise exceptions.NotSupportedError("ray.init inside a worker: the worker already uses "
                                           "its driver's cluster")
    _options.check_init_runtime_env(runtime_env)
    prestart = _prestart_task_workers
    if prestart is None:
        prestart = os.environ.get("TROUPE_RAY_PRESTART_TASK_WORKERS", "1")
    prestart = int(prestart)
    if prestart < 0:
        raise ValueError(f"ray.init: _prestart_task_workers={prestart} is negative")
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
        host_labels=[_resources.labels_of(resources)] if not address else None,
        # Actor and task hosts import troupe.ray: imported once by each host's fork server.
        python_preload=["troupe.ray._host"])
    rt = _runtime.DriverRuntime(cluster, True, namespace or f"anonymous-{os.getpid()}",
                                dict(runtime_env or {}, env_vars=env), _installed_as_ray(),
                                _api.DriverApi,
                                _address_towards(address or os.environ.get("TROUPE_ADDRESS")),
                                standing=bool(address or os.environ.get("TROUPE_ADDRESS")))
    _current.set_runtime(rt)
    rt.tasks.prestart(prestart)
    global _exit_hook_registered
    if not _exit_hook_registered:  # as Ray's init does: a driver that never calls shutdown()
        atexit.register(shutdown, True)  # still stops its cluster before the interpreter ends
        _exit_hook_registered = True
    return _runtime_info()


def _installed_as_ray():
    """Whether `import ray` is troupe.ray in this process (troupe.ray.install())."""
    return sys.modules.get("ray") is sys.modules["troupe.ray"]


def _address_towards(head):
    """This machine's address on the way to the head at `head` ("HOST:PORT"; None: an embedded
    cluster, on loopback): where workers on other hosts reach this driver. A UDP socket's
    connect sends nothing; it only picks the route."""
    if not head:
        return "127.0.0.1"
    host = head.rsplit(":", 1)[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return s.getsockname()[0]


def _runtime_info():
    rt = _current.runtime()
    return {"node_ip_address": rt.nodes[0].address, "session_dir": rt.cluster.session_dir,
            "address": rt.nodes[0].address, "node_id": rt.nodes[0].node_id}


def is_initialized():
    """Whether init() ran in this driver (always True inside a worker)."""
    return _current.runtime() is not None or _context.in_worker()


def shutdown(_exiting_interpreter=False):
    """Stops every actor and task worker of this driver (and the embedded cluster)."""
    rt = _current.runtime()
    if rt is None:
        return
    _current.set_runtime(None)
    rt.shutdown()


def get_gpu_ids():
    """The GPU ids given to this actor or task (in the driver: [])."""
    return list(_context.get("gpu_ids") or [])


class RuntimeContext:
    """What ``ray.get_runtime_context()`` returns."""

    def get_node_id(self):
        rt = _current.runtime()
        if not _context.in_worker() and rt is not None:
            return rt.nodes[0].node_id
        return _context.get("node_id")

    def get_actor_id(self):
        return _context.get("actor_id")

    def get_job_id(self):
        rt = _current.runtime()
        return rt.job_id if rt is not None and not _context.in_worker() else _context.get("job_id")

    def get_placement_group_id(self):
        return _context.get("placement_group")

    def get_accelerator_ids(self):
        return {"GPU": [str(g) for g in get_gpu_ids()]}

    def get_assigned_resources(self):
        raise exceptions.NotSupportedError("get_assigned_resources: use ray.get_gpu_ids()")

    @property
    def namespace(self):
        rt = _current.runtime()
        return rt.namespace if rt is not None and not _context.in_worker() else \
            _context.get("namespace")

    node_id = property(get_node_id)
    job_id = property(get_job_id)
    actor_id = property(get_actor_id)


def get_runtime_context():
    return RuntimeContext()


def api():
    """The API of this process: the driver's (initializing it when needed, as Ray does), or a
    worker's."""
    if _context.in_worker():
        return _api.WorkerApi()
    rt = _current.runtime()
    if rt is None:
        init()
        rt = _current.runtime()
    return _api.DriverApi(rt)


_current.provide_api(api)
