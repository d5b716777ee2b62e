"""Cluster and Worker: the runtime seen from a Python driver."""

import atexit
import os
import sys
import weakref

from troupe import _core
from troupe._errors import InvalidArgumentError, make_error
from troupe._futures import Future, Stream

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_live_clusters = weakref.WeakSet()  # every Cluster of this process not yet collected


@atexit.register
def _shutdown_at_exit():
    """Shuts down every Cluster still up when the interpreter exits, as Ray's driver does with
    ray.shutdown: before finalization, while troupe's I/O threads may still take the GIL to
    complete pending calls (a program that ends with calls in flight exits with its own
    status). Idempotent with an explicit shutdown()."""
    for cluster in list(_live_clusters):
        try:
            cluster.shutdown()
        except Exception as e:  # noqa: BLE001 - exiting: say so, stop the others
            print(f"troupe: shutting down a cluster at exit failed: {e}", file=sys.stderr)


def _bootstrap(paths):
    """The command-line arguments that run troupe._role with `paths` first on sys.path."""
    return ["-c", f"import sys; sys.path[:0] = {paths!r}; "
                  "from troupe._role import main; main()"]


def _driver_paths():
    """The driver's import path, so a worker imports what the driver can (the troupe package
    first, then the driver's own directories; '' is the driver's working directory)."""
    out = [_PACKAGE_PARENT]
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        if p not in out and os.path.isdir(p):
            out.append(p)
    return out


def _exe_spec(value):
    if isinstance(value, str):
        return (value, [], {})
    if isinstance(value, dict):
        return (value["path"], list(value.get("args", [])), dict(value.get("env", {})))
    path, args, env = (tuple(value) + ([], {}))[:3]
    return (path, list(args), dict(env))


def class_name_of(cls):
    """The name a worker is started by: "pkg.module.Class" for a class object, a str as is."""
    if isinstance(cls, str):
        return cls
    module = getattr(cls, "__module__", None)
    if module in (None, "__main__"):
        raise _core_error("invalid_argument",
                          f"class {cls.__qualname__} is defined in __main__: workers import their "
                          "class by name, so define it in an importable module")
    return f"{module}.{cls.__qualname__}"


def _core_error(code, message):
    return make_error(code, message)


def _encode_args(args, kwargs):
    """Positional arguments travel as keywords "__arg0", "__arg1", ... (Python workers map them
    back); C++ workers take keyword arguments only."""
    out = {f"__arg{i}": a for i, a in enumerate(args)}
    out.update(kwargs)
    return out


def set_python_executable(class_name, path):
    """Makes the workers of Python class `class_name` ("pkg.module.Class") that start from now on
    run interpreter `path`, in every Cluster of this process that does not map the class in its
    own ``python_executables``. The interpreter must be able to import troupe. Thread-safe."""
    _core.set_python_executable(class_name_of(class_name), str(path))


class Worker:
    """A handle to one worker process (from Cluster.start_worker or WorkerGroup.workers).

    ``call(method, *args, **kwargs)`` returns a :class:`troupe.Future` at once; calls to one
    worker run in the order they were made. ``stream(method, ...)`` calls a generator (Python)
    or stream (C++) method and returns a :class:`troupe.Stream`.
    """

    def __init__(self, core_worker):
        self._w = core_worker

    name = property(lambda self: self._w.name, doc="The worker's unique name.")
    pid = property(lambda self: self._w.pid, doc="Its process id (0 until started).")
    host = property(lambda self: self._w.host, doc="Index of its host in Cluster.hosts().")
    log_path = property(lambda self: self._w.log_path, doc="Its log file (stdout and stderr).")
    agent_name = property(lambda self: self._w.agent_name,
                          doc="Its name at its agent (unique among a standing cluster's drivers).")
    tcp_endpoint = property(lambda self: self._w.tcp_endpoint,
                            doc="tcp:ADDRESS:PORT where it is called; empty until started.")

    def alive(self):
        """False once the worker died, failed to start or was stopped."""
        return self._w.alive()

    def ready(self):
        """A Future that completes when the worker's object is constructed (or failed to be)."""
        return Future(self._w.ready())

    def died(self):
        """A Future that completes with a description of how the worker ended."""
        return Future(self._w.died())

    def call(self, method, *args, **kwargs):
        """Calls `method` with these arguments; returns a Future at once."""
        return Future(self._w.call(method, _encode_args(args, kwargs)))

    def stream(self, method, *args, **kwargs):
        """Calls a generator/stream method; returns a Stream of its items."""
        return Stream(self._w.call_stream(method, _encode_args(args, kwargs)))

    def stop(self, grace=3.0):
        """SIGTERM to its process group, SIGKILL after `grace` seconds; blocks until it is gone
        and returns how it ended ("exit code 0", "signal 9 (Killed)")."""
        return self._w.stop(grace)

    def __repr__(self):
        return f"<troupe.Worker {self.name} pid={self.pid}>"


def _metrics_port(port):
    """The C++ ClusterOptions::metrics_port of Cluster's `metrics_port` (None: -1, none)."""
    if port is None:
        return -1
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"metrics_port must be a port number 0..65535 or None, not {port!r}")
    return port


def _python_preload(modules):
    """The list of module names of Cluster's `python_preload` (None: none)."""
    if modules is None:
        return []
    if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
        raise ValueError(f"python_preload must be a list of module names, not {modules!r}")
    return list(modules)


class Cluster:
    """The runtime: an embedded head in this process and one agent process per simulated host
    (each with its own loopback address 127.0.0.2, 127.0.0.3, ... and declared resources).

    Args:
        num_hosts: simulated hosts on this machine.
        num_gpus_per_host: declared GPUs per host (real slots for placement and
            CUDA_VISIBLE_DEVICES, even without GPUs).
        num_cpus_per_host: declared CPUs per host (0: this machine's cores).
        session_dir: logs, sockets and the token file (default: a fresh directory under $TMPDIR).
        log_to_driver: copy workers' output to this terminal, prefixed "(name pid=N)".
        start_timeout: seconds to wait for the agents.
        executables: class name -> executable for C++ worker classes (a path, or
            (path, args, env), or {"path":, "args":, "env":}).
        python_executables: "pkg.module.Class" -> Python interpreter for that class (default:
            this interpreter); it must be able to import troupe.
        python: the interpreter for every other Python class and for the agents.
        address: "HOST:PORT" of a standing cluster's head (`troupe start --head`) to use instead
            of an embedded one (num_hosts and the per-host resources are then the hosts'
            own); the environment variable TROUPE_ADDRESS does the same. The token comes from
            TROUPE_TOKEN or TROUPE_TOKEN_FILE.
        metrics_port: serve this driver's Prometheus metrics (calls per method: started,
            finished, failed, latency; bytes sent; restarts) on
            http://127.0.0.1:PORT/metrics to requests with ``Authorization: Bearer TOKEN``
            (the cluster token); 0: any free port (see metrics_address); None: no metrics.
        python_preload: modules (e.g. ["numpy"]) each host's Python fork server imports once
            before it forks Python workers, so that a worker whose class imports them starts
            without importing them again (README "Python fork server"); the environment
            variable TROUPE_PYTHON_PRELOAD (comma-separated) adds to them. A preload that starts
            a thread or initialises CUDA is refused (its workers are exec'd, logged once).
        host_labels: one dict of labels per host (missing: none); a label "resource:NAME" =
            AMOUNT gives the host that much of a custom resource, as `troupe start --resources`.

    Python classes ("pkg.module.Class", or a class object) need no registration: their worker
    is ``python`` running troupe's worker runtime, importing the class by name (with this
    driver's sys.path). Thread-safe. Use as a context manager, or call shutdown().
    """

    def __init__(self, num_hosts=1, num_gpus_per_host=0, num_cpus_per_host=0, *,
                 session_dir="", log_to_driver=True, start_timeout=30.0, executables=None,
                 python_executables=None, python=None, address=None,
                 metrics_port=None, python_preload=None, host_labels=None):
        python = python or sys.executable
        labels = list(host_labels or [])
        hosts = [(f"host-{i}", f"127.0.0.{i + 2}", float(num_cpus_per_host), int(num_gpus_per_host),
                  {str(k): str(v) for k, v in (labels[i] if i < len(labels) else {}).items()})
                 for i in range(num_hosts)]
        boot = _bootstrap(_driver_paths())
        agent = (python, boot, {})
        exes = {k: _exe_spec(v) for k, v in (executables or {}).items()}
        self._c = _core.Cluster(hosts, session_dir, log_to_driver, float(start_timeout), exes,
                                agent, (python, boot, {}), dict(python_executables or {}),
                                address or "", _metrics_port(metrics_port),
                                _python_preload(python_preload))
        _live_clusters.add(self)

    def start_worker(self, cls, *args, host=0, name="", env=None, num_gpus=0, gpus=None,
                     detached=False, launch_wrapper=None, **kwargs):
        """Starts one worker of `cls` (a class object, "pkg.module.Class", or a C++ class name
        mapped in `executables`) with these constructor arguments on host `host`; returns its
        Worker at once (see Worker.ready()). `num_gpus`: that many GPUs no other worker uses,
        chosen by the host's agent; or `gpus`: these GPU ids of the host (may be shared with
        other workers), as the worker's CUDA_VISIBLE_DEVICES. `detached` (standing clusters):
        the worker outlives this driver; Worker.stop from any driver, its agent's exit or
        `troupe stop` end it. `launch_wrapper`: a command prefix the worker runs under, e.g.
        ["nsys", "profile", "-o", "out"] (then it is exec'd, never forked)."""
        name_ = class_name_of(cls)
        return Worker(self._c.start_worker(name_, _encode_args(args, kwargs), host, name,
                                           dict(env or {}), num_gpus,
                                           [int(g) for g in (gpus or [])], bool(detached),
                                           [str(a) for a in (launch_wrapper or [])]))

    # -- the head's registry of named workers (standing clusters; ValueError when embedded) --
    # A record is a dict: ns, name, detached, host (its name), worker (Worker.agent_name),
    # tcp_endpoint (Worker.tcp_endpoint), pid, info (a str the registering driver stores).
    def register_name(self, record, update=False):
        """Claims record["ns"]/record["name"] for this driver: None when it did, else the
        record that holds the name. `update` replaces this driver's own record (ValueError when
        it is gone). A record that is not detached goes when this driver's connection to the head
        closes; any record goes when its worker exits or remove_name."""
        return self._c.register_name(dict(record), bool(update))

    def lookup_name(self, ns, name):
        """The record registered as ns/name by any driver of this cluster, or None."""
        return self._c.lookup_name(ns, name)

    def list_names(self):
        """Every driver's named-worker records (standing clusters): dicts as lookup_name's,
        with "held_by" ("driver at ADDRESS", or "" once that driver left) and no "info"."""
        return self._c.list_names()

    def remove_name(self, ns, name, worker=None):
        """Removes the record ns/name (any driver may); whether there was one. With `worker`,
        only while the record names that worker ("" for one not filled in)."""
        return self._c.remove_name(ns, name, worker)

    def attach_worker(self, record, cls):
        """A Worker for the running worker of `record` (from lookup_name), started by any
        driver: calls go over a new connection, no constructor runs, stop() asks its agent to
        stop it; this driver's shutdown leaves it running."""
        return Worker(self._c.attach_worker(dict(record), class_name_of(cls)))

    def hosts(self):
        """The hosts: index, name, address, num_cpus, gpu_ids, agent_pid, alive."""
        return self._c.hosts()

    # -- the head's book of resources (one for every driver of the cluster) -----------------
    # A bundle is a dict of amounts in Ray's terms: "CPU", "GPU", "memory" (bytes) and named
    # ones (custom resources, "object_store_memory", "node:<address>").
    def try_book(self, booking_id, bundles, strategy="PACK", only_host=None, waiting_as=""):
        """Books `bundles` at the head under `booking_id`, all or nothing: [(host, gpu_ids,
        gpu_share)] per bundle, or None when they do not fit now. With `waiting_as`, the head
        lists this driver as waiting (`troupe status`) and on_resources_freed listeners are
        called whenever trying again may succeed."""
        return _core.try_book(self._c, booking_id, list(bundles), strategy, only_host,
                              waiting_as)

    def book_at(self, booking_id, bundles, placements, overcommit=False):
        """Books `bundles` exactly at `placements` [(host, gpu_ids, gpu_share)]; with
        `overcommit`, even where they do not fit."""
        _core.book_at(self._c, booking_id, list(bundles), list(placements), bool(overcommit))

    def tie_booking(self, booking_id, worker):
        """Ties a booking to `worker` (a Worker): this driver's exit no longer frees it; the
        worker's exit, its host's agent leaving or unbook (from any driver) does."""
        _core.tie_booking(self._c, booking_id, worker._w)

    def unbook(self, booking_id):
        """Frees a booking (idempotent); whether it existed."""
        return _core.unbook(self._c, booking_id)

    def host_resources(self):
        """Every host's {index, name, alive, total, free, gpus_free}, all drivers' bookings
        counted."""
        return _core.host_resources(self._c)

    def on_resources_freed(self, listener):
        """Calls listener() on a troupe thread (it must not block nor call troupe) when a
        booking this driver waits for may fit now; returns an id to remove it."""
        return _core.on_resources_freed(self._c, listener)

    def remove_resources_freed_listener(self, listener_id):
        _core.remove_resources_freed_listener(self._c, listener_id)

    @property
    def session_dir(self):
        """The session directory (logs/, the token file)."""
        return self._c.session_dir()

    @property
    def metrics_address(self):
        """"ADDRESS:PORT" of this driver's metrics endpoint (metrics_port); None without one."""
        return self._c.metrics_address() or None

    def timeline(self, path, timeout=5.0):
        """Writes a Chrome trace-event JSON file at `path` (open it in https://ui.perfetto.dev or
        chrome://tracing): one track per worker and one for the driver, each worker's call spans
        (method, group, rank, argument bytes), the driver's group dispatches and sends, start
        phases, deaths, restarts and host losses, all on the driver's clock. Waits at most
        `timeout` seconds for the workers; those that do not answer are listed in "missing".
        Returns {"recording", "tracks", "events", "missing", "clock_error_us"}; clock_error_us
        bounds the clock alignment of the workers' events."""
        return self._c.timeline(str(path), float(timeout))

    def put(self, data):
        """Writes bytes-like `data` (bytes, bytearray, memoryview, a contiguous NumPy array) once
        into the object store of this driver's host and returns a read-only uint8 NumPy array
        over it: passed as an argument (any number of times, to any worker) it travels as a
        reference; workers on this host map it, each other host gets one copy. The object is
        freed once the array (and every call that carries it) is gone."""
        try:
            view = memoryview(data).cast("B")
        except TypeError as e:
            raise InvalidArgumentError(
                f"Cluster.put takes bytes-like data (bytes, bytearray, memoryview, a contiguous "
                f"NumPy array), not {type(data).__name__} ({e})") from None
        return self._c.put(view)

    def object_store_usage(self, host=0, timeout=5.0):
        """{"objects", "bytes", "capacity", "files"} of host `host`'s object store."""
        return self._c.object_store_usage(int(host), float(timeout))

    def shutdown(self):
        """Stops every worker, then every agent; idempotent."""
        self._c.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
