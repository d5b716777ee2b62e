"""Checks of @ray.remote / .options() keyword arguments, in two steps, as Ray's:

- check(): at decoration and .options(): an option name Ray does not know is a ValueError, a
  value of the wrong type or range a TypeError / ValueError (Ray raises these there too);
- refusal(): at .remote() (actor creation, task submission, method call): the message naming an
  option troupe.ray does not honour and what to use instead, or None; refuse() raises it as
  NotSupportedError. So a module that decorates with such options still imports (nothing is
  silently ignored: its first use fails).
"""

import os

from troupe.ray import _runtime_env
from troupe.ray import exceptions as rex
from troupe.ray._strategies import (NodeAffinitySchedulingStrategy,
                                    PlacementGroupSchedulingStrategy)

# The option names Ray 2.60 accepts (ray/_common/ray_option_utils.py), plus troupe's own.
_RAY_COMMON = {"label_selector", "fallback_strategy", "accelerator_type", "memory", "name",
               "num_cpus", "num_gpus", "object_store_memory", "placement_group",
               "placement_group_bundle_index", "placement_group_capture_child_tasks",
               "resources", "runtime_env", "scheduling_strategy", "enable_task_events", "_labels"}
COMMON = _RAY_COMMON | {"namespace", "_metadata"}
ACTOR = COMMON | {"concurrency_groups", "enable_tensor_transport", "lifetime", "max_concurrency",
                  "max_restarts", "max_task_retries", "max_pending_calls", "get_if_exists",
                  "allow_out_of_order_execution", "_actor_generator_backpressure_num_objects"}
TASK = COMMON | {"max_calls", "max_retries", "num_returns", "retry_exceptions",
                 "_generator_backpressure_num_objects", "_num_objects_per_yield"}
METHOD = {"num_returns", "name", "concurrency_group", "max_task_retries", "retry_exceptions",
          "tensor_transport", "enable_task_events", "_generator_backpressure_num_objects",
          "_num_objects_per_yield"}

_PG = "scheduling_strategy=PlacementGroupSchedulingStrategy(...)"
# option -> (the values that mean "not used", what to use instead)
REFUSED = {
    "placement_group": (("default", None), _PG),
    "placement_group_bundle_index": ((-1, None), _PG),
    "placement_group_capture_child_tasks": ((None, False), _PG),
    "accelerator_type": ((None,), "num_gpus with custom resources declared in "
                                  "ray.init(resources=...)"),
    "object_store_memory": ((None,), "nothing: troupe's object store is sized per host by "
                                     "`troupe start`"),
    "label_selector": ((None, {}), "custom resources (ray.init(resources=...)) and "
                                   "options(resources=...)"),
    "fallback_strategy": ((None, []), "custom resources and options(resources=...)"),
    "enable_task_events": ((None, True), "nothing: troupe records no task events"),
    "_labels": ((None, {}), "custom resources"),
    "max_calls": ((None, 0), "nothing: task workers are reused; start an actor for state that "
                             "must not outlive a call"),
    "max_pending_calls": ((None, -1), "nothing: troupe does not bound an actor's queue"),
    "allow_out_of_order_execution": ((None, False), "max_concurrency > 1 or an async actor"),
    "enable_tensor_transport": ((None, False), "ray.put / arguments (the object store)"),
    "tensor_transport": ((None,), "ray.put / arguments (the object store)"),
    "_generator_backpressure_num_objects": ((None, -1), "num_returns='streaming' (no "
                                                        "backpressure)"),
    "_actor_generator_backpressure_num_objects": ((None, -1), "num_returns='streaming' (no "
                                                              "backpressure)"),
    "_num_objects_per_yield": ((None, 1), "one object per yield"),
}
RUNTIME_ENV_KEYS = {"env_vars", "py_executable", "nsight", "_nsight", "working_dir", "py_modules",
                    "config"}
# runtime_env keys a task's own options may not set (its workers are pooled and reused)
WORKER_LAUNCH_KEYS = {"nsight", "_nsight", "working_dir", "py_modules"}


def check(options, allowed, where):
    """Raises for an option name outside `allowed` (ValueError, as Ray) or a value of the wrong
    type or range (what Ray raises at decoration time)."""
    for key in options:
        if key not in allowed:
            raise ValueError(f"{where}: Invalid option keyword {key!r} (troupe.ray and Ray accept: "
                             f"{', '.join(sorted(allowed))})")
    for key in ("num_cpus", "num_gpus", "memory"):
        v = options.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{where}: the type of keyword {key!r} must be int, float or None, "
                            f"not {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{where}: {key}={v} is negative")
    g = options.get("num_gpus")
    if g is not None and g > 1 and g != int(g):
        raise ValueError(f"{where}: num_gpus={g}: a fraction below 1 or a whole number")
    res = options.get("resources")
    if res is not None:
        if not isinstance(res, dict):
            raise TypeError(f"{where}: resources must be a dict, not {type(res).__name__}")
        if "CPU" in res or "GPU" in res:
            raise ValueError(f"{where}: use the 'num_cpus' and 'num_gpus' keywords instead of "
                             "'CPU' and 'GPU' in 'resources'")
    lifetime = options.get("lifetime")
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError(f"{where}: lifetime must be 'detached' or 'non_detached', not "
                         f"{lifetime!r}")
    n = options.get("num_returns")
    if n is not None and n not in ("streaming", "dynamic") and (
            not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise ValueError(f"{where}: num_returns must be a non-negative int or 'streaming'")
    if options.get("concurrency_groups") is not None and not isinstance(
            options["concurrency_groups"], dict):
        raise TypeError(f"{where}: concurrency_groups must be a dict of group name -> size")
    if options.get("get_if_exists") and "get_if_exists" in allowed and not options.get("name"):
        raise ValueError(f"{where}: the actor name must be specified to use `get_if_exists`")
    _check_runtime_env_types(options.get("runtime_env"), where)


def _check_runtime_env_types(renv, where):
    if renv is None:
        return
    if not isinstance(renv, dict):
        raise TypeError(f"{where}: the type of keyword 'runtime_env' must be dict or None, not "
                        f"{type(renv).__name__}")
    env_vars = renv.get("env_vars")
    if env_vars is not None:
        if not isinstance(env_vars, dict):
            raise TypeError(f"{where}: runtime_env['env_vars'] must be of type Dict[str, str]")
        for k, v in env_vars.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"{where}: runtime_env['env_vars'] must be of type "
                                f"Dict[str, str], but {k!r}: {v!r} is not")


def refusal(options, kind="actor"):
    """The message naming what troupe.ray cannot honour in `options` (of an "actor", a "task"
    or a "method" call) and what to use instead; None when it can honour them all."""
    for key, value in options.items():
        if key in REFUSED:
            unused, instead = REFUSED[key]
            if not any(value is u or (type(value) is type(u) and value == u) for u in unused):
                return f"option {key}={value!r} is not supported by troupe.ray; use {instead}"
    renv = options.get("runtime_env") or {}
    extra = set(renv) - RUNTIME_ENV_KEYS
    if extra:
        return (f"runtime_env keys {sorted(extra)} are not supported by troupe.ray (it supports "
                f"{', '.join(sorted(RUNTIME_ENV_KEYS - {'_nsight'}))}: install packages into an "
                "interpreter and name it with py_executable)")
    if kind == "task":
        launch = set(renv) & WORKER_LAUNCH_KEYS
        if launch:
            return (f"runtime_env {sorted(launch)} on a task: troupe.ray runs tasks on pooled "
                    "workers; set them in ray.init(runtime_env=...) (every worker) or on an "
                    "actor")
    for key in ("working_dir",):
        if isinstance(renv.get(key), str) and "://" in renv[key]:
            return (f"runtime_env {key}={renv[key]!r}: remote URIs are not supported by "
                    "troupe.ray; use a local directory")
    for mod in renv.get("py_modules") or ():
        if isinstance(mod, str) and "://" in mod:
            return (f"runtime_env py_modules entry {mod!r}: remote URIs are not supported by "
                    "troupe.ray; use a local directory or .py file")
    if options.get("num_returns") == "dynamic":
        return "num_returns='dynamic' is not supported by troupe.ray: use 'streaming'"
    return _strategy_refusal(options.get("scheduling_strategy"))


def method_retry(options, base=None):
    """The retry options of an actor method call ({"max_task_retries": n, "retry_exceptions":
    bool or exception types}, the keys given): `base` (the method's own) updated with those in
    `options`; None when there are none. Raises TypeError for a bad value."""
    out = dict(base or {})
    if options.get("max_task_retries") is not None:
        n = options["max_task_retries"]
        if not isinstance(n, int) or isinstance(n, bool) or n < -1:
            raise TypeError(f"max_task_retries must be an int >= -1, not {n!r}")
        out["max_task_retries"] = n
    if "retry_exceptions" in options:
        r = options["retry_exceptions"]
        if isinstance(r, (list, tuple)):
            if not all(isinstance(t, type) and issubclass(t, BaseException) for t in r):
                raise TypeError(f"retry_exceptions must be a bool or a list of exception types, "
                                f"not {r!r}")
            r = tuple(r)
        elif not isinstance(r, bool):
            raise TypeError(f"retry_exceptions must be a bool or a list of exception types, not "
                            f"{r!r}")
        out["retry_exceptions"] = r
    return out or None


def refuse(options, kind, where):
    """Raises NotSupportedError with refusal(options, kind), if any; RuntimeEnvSetupError for a
    py_executable that does not exist."""
    msg = refusal(options, kind)
    if msg is not None:
        raise rex.NotSupportedError(f"{where}: {msg}")
    exe = (options.get("runtime_env") or {}).get("py_executable")
    if exe is not None and not os.path.exists(exe):
        raise rex.RuntimeEnvSetupError(f"{where}: runtime_env py_executable {exe!r} does not "
                                       "exist")


def check_init_runtime_env(runtime_env):
    """ray.init(runtime_env=...): checked and refused at once (the job's every worker)."""
    if not runtime_env:
        return
    check({"runtime_env": runtime_env}, {"runtime_env"}, "ray.init")
    refuse({"runtime_env": runtime_env}, "job", "ray.init")
    _runtime_env.validate_paths(runtime_env, "ray.init")
    if runtime_env.get("nsight", runtime_env.get("_nsight")):
        _runtime_env.check_nsys(runtime_env, "ray.init")


def _strategy_refusal(strategy):
    if strategy is None or strategy in ("DEFAULT", "SPREAD"):
        return None
    if isinstance(strategy, (PlacementGroupSchedulingStrategy, NodeAffinitySchedulingStrategy)):
        return None
    return (f"scheduling_strategy {strategy!r} is not supported by troupe.ray (use 'DEFAULT', "
            "'SPREAD', PlacementGroupSchedulingStrategy or NodeAffinitySchedulingStrategy)")


def merged(base, extra):
    """Options `extra` over `base`; runtime_env env_vars are merged key by key."""
    out = dict(base)
    for k, v in extra.items():
        if k == "runtime_env" and v is not None and out.get("runtime_env"):
            renv = dict(out["runtime_env"])
            for rk, rv in v.items():
                if rk == "env_vars":
                    renv["env_vars"] = dict(renv.get("env_vars") or {}, **(rv or {}))
                else:
                    renv[rk] = rv
            out["runtime_env"] = renv
        else:
            out[k] = v
    return out


def check_method_groups(cls, options, where):
    """Every @ray.method(concurrency_group=G) of `cls` names one of `concurrency_groups`
    (ValueError otherwise, as Ray refuses such an actor)."""
    groups = options.get("concurrency_groups") or {}
    for name, size in groups.items():
        if not isinstance(name, str) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{where}: concurrency_groups must map group names to sizes >= 1, "
                             f"not {name!r}: {size!r}")
    for attr in dir(cls):
        group = getattr(getattr(cls, attr, None), "__ray_concurrency_group__", None)
        if group is not None and group not in groups:
            raise ValueError(f"{where}: method {attr} is in concurrency group {group!r}, which "
                             f"the actor does not define (its groups: {sorted(groups)})")
