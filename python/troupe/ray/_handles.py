"""ActorHandle (a handle to an actor: picklable, counted by the driver's runtime) and
ActorMethod (``handle.method``, whose ``.remote`` calls the actor through this process's API)."""

from troupe.ray import _current, _ids, _options
from troupe.ray.exceptions import NotSupportedError


class ActorMethod:
    """``handle.method``: ``.remote(*args, **kwargs)`` calls it and returns an ObjectRef (a list
    of them with num_returns > 1, an ObjectRefGenerator with num_returns="streaming")."""

    def __init__(self, handle, name, num_returns=None, concurrency_group=None, refused=None,
                 retry=None):
        self._handle = handle
        self._name = name
        self._num_returns = num_returns
        self._group = concurrency_group
        self._refused = refused  # what .remote() refuses (@ray.method / .options()), or None
        self._retry = retry  # _options.method_retry of @ray.method and .options(), or None

    def remote(self, *args, **kwargs):
        if self._refused is not None:
            raise NotSupportedError(f"{self._name}.remote: {self._refused}")
        return _current.api().call_actor(self._handle._actor_id, self._name, tuple(args),
                                         dict(kwargs), self._num_returns, self._group,
                                         self._retry)

    def options(self, **options):
        _options.check(options, _options.METHOD, f"{self._name}.options")
        group = options.get("concurrency_group", self._group)
        if group is not None and not isinstance(group, str):
            raise TypeError(f"{self._name}.options: concurrency_group must be a str, not "
                            f"{type(group).__name__}")
        return ActorMethod(self._handle, self._name,
                           options.get("num_returns", self._num_returns), group,
                           _options.refusal(options, "method") or self._refused,
                           _options.method_retry(options, self._retry))

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Actor methods cannot be called directly. Instead of running "
                        f"'object.{self._name}()', try 'object.{self._name}.remote()'.")


class ActorHandle:
    """A handle to an actor: ``handle.method.remote(...)``. Picklable: it can be passed to and
    returned from tasks and other actors."""

    def __init__(self, actor_id, methods, cls_name):
        self._actor_id = _ids.ActorID(actor_id)
        self._methods = dict(methods)
        self._cls_name = cls_name
        # Counted by the driver's runtime (not inside a worker): the driver's last handle ends
        # a non-detached actor whose handle never left the driver (DriverRuntime.handle_*).
        self._runtime = _current.runtime()
        if self._runtime is not None:
            self._runtime.handle_acquired(actor_id)

    def __del__(self):
        rt = self.__dict__.get("_runtime")
        if rt is not None:
            rt.handle_released(self._actor_id)

    def __getattr__(self, name):
        if name.startswith("__") or name not in self.__dict__.get("_methods", {}):
            if name.startswith("_"):
                raise AttributeError(name)
            raise AttributeError(f"'{self._cls_name}' actor has no method '{name}'")
        entry = self._methods[name]
        return ActorMethod(self, name, entry[2], None, entry[3] if len(entry) > 3 else None,
                           entry[4] if len(entry) > 4 else None)

    def _actor_id_hex(self):
        return self._actor_id.hex()

    def __repr__(self):
        return f"Actor({self._cls_name.rsplit('.', 1)[-1]}, {self._actor_id})"

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self):
        return hash(self._actor_id)

    def __reduce__(self):
        if self._runtime is not None:
            self._runtime.handle_escaped(self._actor_id)
        return (ActorHandle, (str(self._actor_id), self._methods, self._cls_name))
