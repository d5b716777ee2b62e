"""Checks of @ray.remote / .options() keyword arguments: the supported ones pass, the others fail
at once naming the option and what to use instead (nothing is silently ignored)."""

import os

from troupe.ray import exceptions as rex

COMMON = {"num_cpus", "num_gpus", "resources", "runtime_env", "scheduling_strategy", "name",
          "namespace", "memory", "_metadata"}
ACTOR = COMMON | {"lifetime", "get_if_exists", "max_concurrency", "max_restarts",
                  "concurrency_groups", "max_task_retries"}
TASK = COMMON | {"num_returns", "max_retries", "retry_exceptions"}
METHOD = {"num_returns", "name", "concurrency_group"}

REFUSED = {
    "placement_group": "scheduling_strategy=PlacementGroupSchedulingStrategy(...)",
    "placement_group_bundle_index": "scheduling_strategy=PlacementGroupSchedulingStrategy(...)",
    "placement_group_capture_child_tasks":
        "scheduling_strategy=PlacementGroupSchedulingStrategy(...)",
    "accelerator_type": "num_gpus with custom resources declared in ray.init(resources=...)",
    "object_store_memory": "nothing: troupe's object store is sized per host by `troupe start`",
    "label_selector": "custom resources (ray.init(resources=...)) and options(resources=...)",
    "enable_task_events": "nothing: troupe records no task events",
    "_labels": "custom resources",
}
RUNTIME_ENV_KEYS = {"env_vars", "py_executable"}


def check(options, allowed, where):
    """Raises for an option outside `allowed` or a value troupe.ray cannot honour."""
    for key, value in options.items():
        if key in REFUSED:
            raise rex.NotSupportedError(f"{where}: option {key!r} is not supported by "
                                        f"troupe.ray; use {REFUSED[key]}")
        if key not in allowed:
            raise TypeError(f"{where}: unknown option {key!r} (troupe.ray supports: "
                            f"{', '.join(sorted(allowed))})")
    renv = options.get("runtime_env") or {}
    extra = set(renv) - RUNTIME_ENV_KEYS
    if extra:
        raise rex.NotSupportedError(
            f"{where}: runtime_env keys {sorted(extra)} are not supported by troupe.ray (it "
            "supports env_vars and py_executable: install packages into an interpreter and "
            "name it with py_executable)")
    exe = renv.get("py_executable")
    if exe is not None and not os.path.exists(exe):
        raise rex.RuntimeEnvSetupError(f"{where}: runtime_env py_executable {exe!r} does not "
                                       "exist")
    for key in ("max_retries", "max_task_retries"):
        if options.get(key) not in (None, 0):
            raise rex.NotSupportedError(
                f"{where}: {key}={options[key]!r}: troupe.ray does not retry tasks; catch the "
                "error and resubmit (or use max_restarts for actors)")
    if options.get("retry_exceptions"):
        raise rex.NotSupportedError(f"{where}: retry_exceptions: troupe.ray does not retry "
                                    "tasks; catch the error and resubmit")
    if options.get("memory"):
        raise rex.NotSupportedError(f"{where}: memory={options['memory']!r}: troupe.ray does not "
                                    "schedule by memory; use num_cpus or custom resources")
    lifetime = options.get("lifetime")
    if lifetime not in (None, "detached", "non_detached"):
        raise ValueError(f"{where}: lifetime must be 'detached' or 'non_detached', not "
                         f"{lifetime!r}")
    g = options.get("num_gpus")
    if g is not None and (g < 0 or (g > 1 and g != int(g))):
        raise ValueError(f"{where}: num_gpus={g}: a fraction below 1 or a whole number")
    c = options.get("num_cpus")
    if c is not None and c < 0:
        raise ValueError(f"{where}: num_cpus={c} is negative")
    n = options.get("num_returns")
    if n is not None and n != "streaming" and (not isinstance(n, int) or n < 0):
        raise ValueError(f"{where}: num_returns must be a non-negative int or 'streaming'")
    if n == "dynamic":
        raise rex.NotSupportedError(f"{where}: num_returns='dynamic': use 'streaming'")
    if options.get("concurrency_groups") is not None and not isinstance(
            options["concurrency_groups"], dict):
        raise TypeError(f"{where}: concurrency_groups must be a dict of group name -> size")
    _check_strategy(options.get("scheduling_strategy"), where)


def _check_strategy(strategy, where):
    from troupe.ray.util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy)

    if strategy is None or strategy in ("DEFAULT", "SPREAD"):
        return
    if isinstance(strategy, (PlacementGroupSchedulingStrategy, NodeAffinitySchedulingStrategy)):
        return
    raise rex.NotSupportedError(
        f"{where}: scheduling_strategy {strategy!r} is not supported by troupe.ray (use "
        "'DEFAULT', 'SPREAD', PlacementGroupSchedulingStrategy or "
        "NodeAffinitySchedulingStrategy)")


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
