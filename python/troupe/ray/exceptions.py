"""Ray's exception classes, as troupe.ray raises them (``ray.exceptions``)."""


class RayError(Exception):
    """Base class of every error troupe.ray raises for a remote failure."""


class RayTaskError(RayError):
    """A task or actor method raised. ``cause`` is the original exception, ``traceback_str`` the
    worker's traceback, ``function_name`` the function or method. What ``ray.get`` raises is
    also an instance of the cause's type (``except ValueError`` catches it), as in Ray."""

    def __init__(self, function_name="", traceback_str="", cause=None, proctitle="", pid=0,
                 ip=""):
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.pid = pid
        self.ip = ip
        super().__init__(self._text())

    def _text(self):
        head = f"{type(self.cause).__name__ if self.cause else 'Exception'} in {self.function_name}"
        return f"{head} (pid={self.pid}, ip={self.ip})\n{self.traceback_str}".rstrip()

    def __str__(self):
        return self._text()

    def as_instanceof_cause(self):
        """This error as an instance of a class deriving from both RayTaskError and the cause's
        type; itself when the cause's type cannot be subclassed."""
        cause_cls = type(self.cause)
        if self.cause is None or issubclass(cause_cls, RayTaskError):
            return self
        try:
            cls = _dual_classes.get(cause_cls)
            if cls is None:
                cls = type(f"RayTaskError({cause_cls.__name__})", (RayTaskError, cause_cls),
                           {"__module__": __name__})
                _dual_classes[cause_cls] = cls
            err = cls.__new__(cls)
            RayTaskError.__init__(err, self.function_name, self.traceback_str, self.cause,
                                  pid=self.pid, ip=self.ip)
            err.args = (self.cause,)  # as Ray's: the cause itself, not its args
            return err
        except TypeError:  # final classes, layout conflicts
            return self

    def __reduce__(self):
        return (_rebuild_task_error, (self.function_name, self.traceback_str, self.cause,
                                      self.pid, self.ip))


_dual_classes = {}


def _rebuild_task_error(function_name, traceback_str, cause, pid, ip):
    return RayTaskError(function_name, traceback_str, cause, pid=pid, ip=ip).as_instanceof_cause()


class RayActorError(RayError):
    """The actor is dead (killed, crashed, its constructor raised, or its host is lost): calls
    to it fail with this. ``actor_id`` names it; ``error_msg`` says how it ended."""

    def __init__(self, actor_id=None, error_msg="The actor died unexpectedly."):
        self.actor_id = actor_id
        self.error_msg = error_msg
        super().__init__(error_msg)


class ActorDiedError(RayActorError):
    """The actor's process is gone (Ray's subclass of RayActorError)."""


class ActorUnavailableError(RayActorError):
    """The actor cannot be reached for now."""


class GetTimeoutError(RayError, TimeoutError):
    """``ray.get(..., timeout=)`` passed its timeout before every value was ready."""


class ObjectLostError(RayError):
    """An object's value is gone (its owner or the worker that held it died)."""

    def __init__(self, object_ref_hex="", message=""):
        self.object_ref_hex = object_ref_hex
        super().__init__(message or f"object {object_ref_hex} is lost")


class OwnerDiedError(ObjectLostError):
    """The owner of the object died."""


class TaskCancelledError(RayError):
    """The task was cancelled."""


class RuntimeEnvSetupError(RayError):
    """The runtime environment could not be set up (e.g. py_executable does not exist)."""


class RaySystemError(RayError):
    """An internal error of the runtime."""


class NotSupportedError(RayError, NotImplementedError):
    """troupe.ray does not implement this part of Ray's API (the message names the feature and
    what to use instead)."""


class PlacementGroupSchedulingError(RayError, ValueError):
    """A placement group or scheduling strategy cannot be honoured (bad bundle index, removed
    group)."""


class ActorAlreadyExistsError(ValueError, RayError):
    """A named actor of that name already lives in the namespace (also a ValueError, as
    Ray's)."""


class TaskUnschedulableError(RayError):
    """No node can ever run the task (a hard NodeAffinitySchedulingStrategy to a node that is
    not alive)."""


class ActorUnschedulableError(RayError):
    """No node can ever host the actor (a hard NodeAffinitySchedulingStrategy to a node that
    is not alive)."""


class WorkerCrashedError(RayError):
    """The worker running a task died."""
