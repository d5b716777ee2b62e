"""Ray tasks on troupe: RemoteFunction, a function under @ray.remote."""

import inspect

from troupe.ray import _current, _options
from troupe.ray.actor import definition_spec
from troupe.ray.exceptions import NotSupportedError


class RemoteFunction:
    """``f.remote(*args, **kwargs)`` runs the function as a task on a worker and returns an
    ObjectRef (a list with num_returns > 1, an ObjectRefGenerator with "streaming");
    ``f.options(**opts)`` overrides the decorator's options. Option names and types are checked
    at decoration and .options() (as Ray does); what troupe.ray cannot honour is refused at
    .remote() (_options.refusal), so a module decorating with it still imports."""

    def __init__(self, fn, options):
        _options.check(options, _options.TASK, f"@ray.remote function {fn.__qualname__}")
        self._troupe_ray_target = fn
        self._default_options = dict(options)
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__module__ = fn.__module__
        self.__doc__ = fn.__doc__
        self._spec = None

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Remote functions cannot be called directly. Instead of running "
                        f"'{self.__name__}()', try '{self.__name__}.remote()'.")

    def options(self, **options):
        merged = _options.merged(self._default_options, options)
        _options.check(merged, _options.TASK, f"{self.__name__}.options")
        outer = self

        class _Bound:
            def remote(self, *args, **kwargs):
                return outer._submit(merged, args, kwargs)

        return _Bound()

    def remote(self, *args, **kwargs):
        return self._submit(self._default_options, args, kwargs)

    def bind(self, *args, **kwargs):
        raise NotSupportedError("Ray DAGs (.bind) are not supported by troupe.ray: call "
                                ".remote() and pass the ObjectRefs")

    def _submit(self, options, args, kwargs):
        _options.refuse(options, "task", f"{self.__qualname__}.remote")
        if self._spec is None:
            self._spec = definition_spec(self._troupe_ray_target)
        if options.get("num_returns") is None and inspect.isgeneratorfunction(
                self._troupe_ray_target):
            options = dict(options, num_returns="streaming")  # Ray's default for generators
        return _current.api().submit_task(self._spec, self.__qualname__, dict(options),
                                          tuple(args), dict(kwargs))
