"""troupe.ray's public functions on objects and actors (re-exported by the package): remote,
get, wait, put, kill, cancel, get_actor, and the cluster's nodes and resources. Each checks its
arguments as Ray does, then calls this process's API (troupe.ray._current)."""

from troupe.ray import _current
from troupe.ray._handles import ActorHandle
from troupe.ray._objects import ObjectRef, ObjectRefGenerator
from troupe.ray.actor import make_actor_class
from troupe.ray.remote_function import RemoteFunction


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
    values = _current.api().get(refs, timeout)
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
    return _current.api().wait(refs, num_returns, timeout)


def put(value, *, _owner=None):
    """An ObjectRef of `value` (passing it to many calls encodes it once per call; large
    buffers travel through the host's object store)."""
    if isinstance(value, ObjectRef):
        raise TypeError("Calling 'put' on an ray.ObjectRef is not allowed.")
    return _current.api().put(value)


def kill(actor, *, no_restart=True):
    """Kills the actor's process at once; with no_restart=False it restarts when max_restarts
    allows. Its pending calls fail with ActorDiedError."""
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ray.kill() only supported for actors. For tasks, try ray.cancel(). "
                         f"Got: {type(actor).__name__}.")
    _current.api().kill(actor._actor_id, no_restart)


def cancel(object_ref, *, force=False, recursive=True):
    """Cancels the task of `object_ref`: one not yet running never runs (ray.get raises
    TaskCancelledError); a running one is stopped with its worker (ray.get raises
    TaskCancelledError with force, else RayTaskError(TaskCancelledError), as Ray's interrupted
    task). An ended task is left as it is. force=True on an actor call: ValueError, as Ray's.
    `recursive` is accepted: the tasks a cancelled task submitted run on."""
    if not isinstance(object_ref, ObjectRef):
        raise TypeError("ray.cancel() only supported for object refs. For actors, try "
                        f"ray.kill(). Got: {type(object_ref).__name__}.")
    _current.api().cancel(object_ref, bool(force))


def get_actor(name, namespace=None):
    """The handle of the live actor named `name` in `namespace` (default: this job's);
    ValueError when there is none."""
    if not name:
        raise ValueError("Please supply a non-empty value to get_actor")
    return _current.api().get_actor(name, namespace)


def nodes():
    """One dict per node: NodeID, Alive, NodeManagerAddress, Resources, ..."""
    return _current.api().nodes()


def cluster_resources():
    return _current.api().cluster_resources()


def available_resources():
    return _current.api().available_resources()
