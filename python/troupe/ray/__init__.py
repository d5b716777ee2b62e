"""troupe.ray: the subset of Ray's API that RL frameworks use, on troupe.

``from troupe import ray`` (or ``troupe.ray.install()`` then ``import ray``): a Ray actor is a
troupe worker hosting the class (troupe.ray._host.ActorHost), a task runs on a pooled troupe
worker of its node, an ObjectRef is a troupe future (or a value held by the driver), a
placement group reserves bundles at the head, in the one book of every driver of the cluster. The
README's "Coming from Ray" section lists what is supported and what is refused; anything
outside that subset raises NotSupportedError (or TypeError for an unknown option) naming it.
ARCHITECTURE.md ("The Python package") names the layers of its modules.
"""

import sys

from troupe.ray import _current, exceptions
from troupe.ray import _private, actor, experimental, remote_function, util
from troupe.ray._objects import ObjectRef, ObjectRefGenerator
from troupe.ray._private import services
from troupe.ray._private import state as private_state
from troupe.ray._public import (available_resources, cancel, cluster_resources, get, get_actor,
                                kill, nodes, put, remote, wait)
from troupe.ray._session import (RuntimeContext, get_gpu_ids, get_runtime_context, init,
                                 is_initialized, shutdown)
from troupe.ray.actor import ActorClass, ActorHandle, make_actor_class, method
from troupe.ray.experimental import state as experimental_state
from troupe.ray.experimental.state import api as state_api
from troupe.ray.remote_function import RemoteFunction
from troupe.ray.util import state as util_state

DynamicObjectRefGenerator = ObjectRefGenerator


def install():
    """Makes ``import ray`` (and ray.util, ray.util.placement_group,
    ray.util.scheduling_strategies, ray.util.state, ray.exceptions, ray.actor,
    ray.experimental.state.api, ray._private.services, ray._private.state) resolve to
    troupe.ray in this process and in the workers that troupe.ray starts afterwards."""
    # ray.util.placement_group is both a function (an attribute of ray.util) and a module.
    placement_group = sys.modules["troupe.ray.util.placement_group"]
    scheduling_strategies = sys.modules["troupe.ray.util.scheduling_strategies"]
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
    rt = _current.runtime()
    if rt is not None:
        rt.install_as_ray = True


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
            import cloudpickle  # optional (python3-cloudpickle): loaded only when asked for
        except ImportError:
            raise AttributeError("ray.cloudpickle: cloudpickle is not installed (Debian: "
                                 "apt-get install python3-cloudpickle)") from None
        return cloudpickle
    raise AttributeError(f"module 'ray' (troupe.ray) has no attribute {name!r}")
