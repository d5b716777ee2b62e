"""Ray actors on troupe: ActorClass (a class under @ray.remote), ActorHandle and ActorMethod."""

import importlib
import inspect
import sys

from troupe.ray import _current, _options, _runtime_env, _serial
from troupe.ray._handles import ActorHandle, ActorMethod  # noqa: F401 - ray.actor names them
from troupe.ray.exceptions import NotSupportedError


def definition_spec(obj):
    """How a worker finds `obj` (a function or class): by module and qualified name, or pickled
    by value when it lives in __main__ or in a function body."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if module in (None, "__main__") or _resolve(module, qualname) is not obj:
        return ("value", _serial.inline(_serial.dumps_by_value(obj)))
    return ("ref", module, qualname)


def _resolve(module, qualname):
    """What `module`.`qualname` names now, or None: a definition in a function body ("<locals>"
    in its name), or a class made by type() inside a module (its __module__ is that module's,
    but no name there refers to it), is sent by value."""
    try:
        target = sys.modules.get(module) or importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
        return target
    except Exception:  # noqa: BLE001 - any failure to resolve means: send it by value
        return None


def make_actor_class(cls, options):
    """What @ray.remote makes of class `cls`: as in Ray, an instance of a class named
    "ActorClass(<cls name>)" that derives from ActorClass and from `cls` (so class attributes,
    dir() and __ray_actor_class__, the original class, read as on Ray's). A class that cannot
    be derived from (a conflicting metaclass or layout, abstract methods) gets a plain
    ActorClass, which still reads its attributes through __getattr__."""
    name = f"ActorClass({cls.__name__})"
    try:
        derived = type(cls)(name, (ActorClass, cls), {"__module__": cls.__module__,
                                                      "__qualname__": name,
                                                      "__ray_actor_class__": cls})
        self = object.__new__(derived)
    except Exception:  # noqa: BLE001 - fall back to the plain wrapper
        self = object.__new__(ActorClass)
    ActorClass.__init__(self, cls, options)
    return self


def method_table(cls):
    """name -> (is_generator, is_async, num_returns, refusal and retry options from @ray.method)
    of the public methods of `cls` (Ray lets a driver call any method not starting with
    "__")."""
    out = {}
    for name in dir(cls):
        if name.startswith("__"):
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, (property, classmethod)):
            continue
        fn = getattr(cls, name)
        if not callable(fn):
            continue
        out[name] = (inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn),
                     inspect.iscoroutinefunction(fn), getattr(fn, "__ray_num_returns__", None),
                     getattr(fn, "__ray_refused__", None), getattr(fn, "__ray_retry__", None))
    return out


class ActorClass:
    """A class decorated with @ray.remote: ``.remote(*args, **kwargs)`` creates an actor and
    returns its ActorHandle; ``.options(**opts)`` overrides the decorator's options."""

    def __init__(self, cls, options):
        _options.check(options, _options.ACTOR, f"@ray.remote class {cls.__qualname__}")
        self._troupe_ray_target = cls
        self._default_options = dict(options)
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__
        self._methods = None

    def __getattr__(self, name):
        # Class attributes (configure_worker, constants) read through the decorated class, as
        # Ray's ActorClass derives from the user's class.
        if name.startswith("__") or name == "_troupe_ray_target":
            raise AttributeError(name)
        return getattr(self.__dict__["_troupe_ray_target"], name)

    def __reduce__(self):
        return (make_actor_class, (self._troupe_ray_target, self._default_options))

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Actors cannot be instantiated directly. Instead of "
                        f"'{self.__name__}()', use '{self.__name__}.remote()'.")

    def options(self, **options):
        merged = _options.merged(self._default_options, options)
        _options.check(merged, _options.ACTOR, f"{self.__name__}.options")
        outer = self

        class _Bound:
            def remote(self, *args, **kwargs):
                return outer._create(merged, args, kwargs)

            def bind(self, *args, **kwargs):
                return outer.bind(*args, **kwargs)

        return _Bound()

    def remote(self, *args, **kwargs):
        return self._create(self._default_options, args, kwargs)

    def bind(self, *args, **kwargs):
        raise NotSupportedError("Ray DAGs (.bind) are not supported by troupe.ray: call "
                                ".remote() and pass the ObjectRefs")

    def _create(self, options, args, kwargs):
        cls = self._troupe_ray_target
        if self._methods is None:
            self._methods = method_table(cls)
        options = dict(options)
        where = f"{cls.__qualname__}.remote"
        _options.refuse(options, "actor", where)
        renv = options.get("runtime_env") or {}
        if renv:
            _runtime_env.validate_paths(renv, where)
            if renv.get("nsight", renv.get("_nsight")):  # the job's env_vars count (PATH)
                _runtime_env.check_nsys(_runtime_env.effective(
                    getattr(_current.runtime(), "job_runtime_env", None), renv), where)
        _options.check_method_groups(cls, options, f"{cls.__qualname__}.options")
        return _current.api().create_actor(
            definition_spec(cls), f"{cls.__module__}.{cls.__qualname__}", self._methods, options,
            tuple(args), dict(kwargs))


def method(num_returns=None, concurrency_group=None, **options):
    """@ray.method(num_returns=N, concurrency_group=G): the default num_returns of an actor
    method, and the concurrency group its calls run in (one of the actor's
    `concurrency_groups`; default: the actor's own max_concurrency). Ray's other method options
    are accepted here and refused when the method is called (names Ray does not know: a
    ValueError at once)."""
    unknown = set(options) - _options.METHOD
    if unknown:
        raise ValueError(f"@ray.method: unexpected keyword arguments {sorted(unknown)} (the "
                         f"supported ones are {sorted(_options.METHOD - {'name'})})")
    refused = _options.refusal(options, "method")

    retry = _options.method_retry(options)

    def mark(fn):
        fn.__ray_num_returns__ = num_returns
        fn.__ray_concurrency_group__ = concurrency_group
        fn.__ray_refused__ = refused
        fn.__ray_retry__ = retry
        return fn

    return mark
