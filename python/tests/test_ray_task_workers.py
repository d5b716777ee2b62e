"""Tasks on prestarted workers: ray.init starts task workers on every node at once (forked by its
fork server), so the first task runs on one that is already up; how many tasks run at once on a
node is bounded by its CPUs (the head books each task's), not by the pool."""

import os
import time

import pytest

from troupe import ray
from troupe.ray import _current


@ray.remote
def whoami():
    return os.getpid(), ray.util.get_node_ip_address()


@ray.remote
def interval(seconds):
    start = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of this machine
    time.sleep(seconds)
    return start, time.monotonic()


def _prestarted():
    return list(_current.runtime().tasks.all)


def test_the_first_tasks_run_on_the_workers_started_with_ray_init():
    ray.init(num_cpus=2, _num_nodes=2, _prestart_task_workers=1)
    try:
        workers = _prestarted()
        assert len(workers) == 2  # one per node, before any task
        for worker in workers:
            worker.ready().result(60)
        pids = {worker.pid for worker in workers}
        node_ips = [n["NodeManagerAddress"] for n in ray.nodes()]
        seen = set()
        for ip in node_ips:
            node = next(n["NodeID"] for n in ray.nodes() if n["NodeManagerAddress"] == ip)
            on = whoami.options(scheduling_strategy=ray.util.scheduling_strategies.
                                NodeAffinitySchedulingStrategy(node, soft=False))
            pid, where = ray.get(on.remote(), timeout=60)
            assert where == ip
            seen.add(pid)
        assert seen == pids  # each node's first task ran on its prestarted worker
        assert len(_prestarted()) == 2  # and no other was started for them
    finally:
        ray.shutdown()


def test_the_cpus_bound_how_many_tasks_run_at_once():
    ray.init(num_cpus=2, _prestart_task_workers=4)  # more workers than CPUs
    try:
        spans = ray.get([interval.remote(0.3) for _ in range(6)], timeout=60)
        events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                        key=lambda x: (x[0], x[1]))
        running = most = 0
        for _, step in events:
            running += step
            most = max(most, running)
        assert most == 2, spans  # 2 CPUs: two at a time, never three
    finally:
        ray.shutdown()


def test_no_prestart_and_a_negative_count():
    ray.init(num_cpus=1, _prestart_task_workers=0)
    try:
        assert _prestarted() == []
        assert ray.get(whoami.remote(), timeout=60)[0] > 0
        assert len(_prestarted()) == 1  # started on demand
    finally:
        ray.shutdown()
    with pytest.raises(ValueError, match="negative"):
        ray.init(_prestart_task_workers=-1)
    assert not ray.is_initialized()
