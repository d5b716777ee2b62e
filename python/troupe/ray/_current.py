"""This process's troupe.ray session: the driver's runtime once ray.init ran, and the API that
operations go through (the driver's own, or a worker's calls to its driver).

The slot sits at the bottom of troupe.ray so that the references handed to users (ObjectRef,
ActorHandle, PlacementGroup) reach the API without importing the layers above them: the
session module (troupe.ray._session) provides the API at import, and the package imports it
before anything a user can call.
"""

_runtime = None  # the DriverRuntime of this process, once ray.init ran (never in a worker)
_api_of = None  # () -> the API of this process; set by provide_api


def runtime():
    """The driver's DriverRuntime, or None (before ray.init, after shutdown, in a worker)."""
    return _runtime


def set_runtime(runtime_or_none):
    global _runtime
    _runtime = runtime_or_none


def provide_api(api_of):
    """Installs `api_of()`, which returns this process's API (initializing a driver when
    needed, as Ray does)."""
    global _api_of
    _api_of = api_of


def api():
    """The API of this process (troupe.ray._api.DriverApi or WorkerApi)."""
    return _api_of()
