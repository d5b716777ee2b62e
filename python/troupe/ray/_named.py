"""Named actors shared by the drivers of a standing cluster, through the head's registry of
named workers (troupe.Cluster.register_name / lookup_name / remove_name / attach_worker).

A driver that creates a named actor claims (namespace, name) at the head before it starts the
actor (a name taken by any driver raises ValueError at once, or with get_if_exists returns a
handle to the existing actor), and fills in the worker once it runs. Another driver's get_actor
finds the record, waits until the worker is filled in, and attaches to the running worker: its
calls go over a connection of its own, ray.kill asks the worker's agent to stop it. A record that
is not detached goes when its driver's connection to the head closes; any record goes when its
worker exits.
"""

import json
import sys
import time

from troupe.ray import _actors, _runtime_env

# How long get_actor waits for a claimed name's actor to be placed and started.
START_WAIT_S = 60.0
_POLL_S = 0.05


def _json_method(entry):
    """A method-table entry as JSON: retry_exceptions as exception types does not travel (the
    attaching driver retries those calls only on the actor's death)."""
    out = list(entry)
    if len(out) > 4 and out[4] and not isinstance(out[4].get("retry_exceptions", False), bool):
        out[4] = {k: v for k, v in out[4].items() if k != "retry_exceptions"}
    return out


def _record(actor, detached):
    info = {"actor_id": actor.actor_id, "cls_name": actor.cls_name,
            "methods": {k: _json_method(v) for k, v in actor.methods.items()},
            "use_async_path": actor.use_async_path,
            "max_concurrency": actor.options.get("max_concurrency"),
            "concurrency_groups": actor.options.get("concurrency_groups"),
            "max_task_retries": actor.options.get("max_task_retries")}
    return {"ns": actor.namespace, "name": actor.name, "detached": bool(detached),
            "info": json.dumps(info)}


def is_detached(rt, options):
    return rt.standing and options.get("lifetime") == "detached"


def claim(rt, actor):
    """Claims the actor's name at the head: None when it did, else the record holding it."""
    return rt.cluster.register_name(_record(actor, is_detached(rt, actor.options)))


def publish(rt, actor, worker):
    """Fills in the record of `actor` with its running worker (dispatcher thread)."""
    rec = _record(actor, is_detached(rt, actor.options))
    rec.update(host=actor.node.name, worker=worker.agent_name, tcp_endpoint=worker.tcp_endpoint,
               pid=worker.pid)
    try:
        rt.cluster.register_name(rec, update=True)
    except ValueError:
        # The record went with an earlier incarnation's exit: claim the name again.
        taken = rt.cluster.register_name(rec)
        if taken is not None:
            print(f"troupe.ray: the name {actor.name!r} (namespace {actor.namespace!r}) was "
                  "taken by another driver while the actor restarted", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - the head may be gone; the actor still runs
        print(f"troupe.ray: could not publish actor {actor.name!r}: {e}", file=sys.stderr)


def forget(rt, actor, worker):
    """Removes the record of `actor` while it names `worker` (or no worker yet): after its
    kill, or its death for good (a creation that failed leaves a record never filled in)."""
    for held_by in (worker.agent_name, ""):
        try:
            if rt.cluster.remove_name(actor.namespace, actor.name, held_by):
                return
        except Exception:  # noqa: BLE001 - the head may be gone; its records went with it
            return


def lookup(rt, ns, name):
    """The head's record of ns/name once its worker runs, or None when there is none (waits at
    most START_WAIT_S for a claimed name's worker)."""
    deadline = time.monotonic() + START_WAIT_S
    while True:
        rec = rt.cluster.lookup_name(ns, name)
        if rec is None or rec["worker"]:
            return rec
        if time.monotonic() >= deadline:
            raise ValueError(f"Actor '{name}' in namespace '{ns}' was created by another driver "
                             f"but did not start within {START_WAIT_S:.0f} s")
        time.sleep(_POLL_S)


def attach(rt, rec):
    """An ActorState over the running worker of `rec` (another driver's actor)."""
    info = json.loads(rec["info"])
    methods = {k: tuple(v) for k, v in info["methods"].items()}
    options = {"name": rec["name"], "namespace": rec["ns"],
               "max_concurrency": info.get("max_concurrency"),
               "concurrency_groups": info.get("concurrency_groups"),
               "max_task_retries": info.get("max_task_retries"),
               "lifetime": "detached" if rec["detached"] else None}
    actor = _actors.ActorState(rt, info["actor_id"], None, info["cls_name"], methods, options,
                               (), {})
    actor.use_async_path = bool(info["use_async_path"])
    actor.attached = True
    worker = rt.cluster.attach_worker(rec, _runtime_env.host_class("ActorHost", None))
    with rt.lock:
        rt.actors[actor.actor_id] = actor
        rt.named[(rec["ns"], rec["name"])] = actor.actor_id
    actor.started(worker)
    worker.died().add_done_callback(lambda f: rt.post(lambda: rt._actor_died(actor, worker, f)))
    return actor
