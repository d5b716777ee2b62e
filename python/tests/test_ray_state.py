"""The state queries and class shapes RL frameworks rely on (verl's RayWorkerGroup): Ray's
derived ActorClass, classes made by type(), ray.experimental.state.api.get_actor and
ray._private.state (real processes: an embedded cluster of 2 simulated hosts, 2 CPUs and 2
declared GPUs each)."""

import time

import pytest

from troupe import ray
from troupe.ray._private import state as private_state
from troupe.ray.experimental.state import api as state_api
from troupe.ray.util.placement_group import placement_group, remove_placement_group

import ray_workers as w


@pytest.fixture(scope="module")
def cluster():
    ray.init(_num_nodes=2, num_cpus=2, num_gpus=2)
    yield
    ray.shutdown()


def _cpu_gpu(per_node):
    return {node: (r.get("CPU", 0.0), r.get("GPU", 0.0)) for node, r in per_node.items()}


def test_resources_per_node_and_the_group_table(cluster):
    node_ids = sorted(n["NodeID"] for n in ray.nodes())
    assert sorted(private_state.available_resources_per_node()) == node_ids
    assert _cpu_gpu(private_state.total_resources_per_node()) == {n: (2.0, 2.0) for n in node_ids}
    assert _cpu_gpu(private_state.available_resources_per_node()) == {
        n: (2.0, 2.0) for n in node_ids}
    pg = placement_group([{"CPU": 1, "GPU": 1}], strategy="STRICT_PACK")
    ray.get(pg.ready(), timeout=10)
    assert pg.id.hex() == pg.id  # Ray's PlacementGroupID: hex() is the id
    table = private_state.state.placement_group_table(pg.id)
    assert table["state"] == "CREATED" and table["bundles"] == {0: {"CPU": 1, "GPU": 1}}
    taken = table["bundles_to_node_id"][0]
    assert taken in node_ids
    want = {n: (1.0, 1.0) if n == taken else (2.0, 2.0) for n in node_ids}
    assert _cpu_gpu(private_state.available_resources_per_node()) == want
    remove_placement_group(pg)
    assert _cpu_gpu(private_state.available_resources_per_node()) == {
        n: (2.0, 2.0) for n in node_ids}


def test_actor_class_is_rays_derived_class(cluster):
    assert type(w.Counter).__name__ == "ActorClass(Counter)"  # verl parses this name
    assert isinstance(w.Counter, ray.actor.ActorClass)
    assert w.Counter.__ray_actor_class__.__name__ == "Counter"
    assert {"add", "get", "stream"} <= set(dir(w.Counter))
    with pytest.raises(TypeError, match="remote"):
        w.Counter()
    # As sent to a worker (cloudpickle: the original class by value, its name now being the
    # ActorClass's), it is the same derived ActorClass.
    again = ray.cloudpickle.loads(ray.cloudpickle.dumps(w.Counter))
    assert type(again).__name__ == "ActorClass(Counter)"
    c = again.remote(5)
    assert ray.get(c.add.remote(2)) == 7


def test_class_made_by_type_is_sent_by_value(cluster):
    h = w.made_by_type.remote()
    assert ray.get(h.hello.remote(), timeout=30) == "made by type()"


def test_state_api_get_actor_follows_the_actor(cluster):
    c = w.Counter.options(name="watched").remote()
    pid = ray.get(c.pid.remote())
    record = state_api.get_actor(c._actor_id.hex())
    assert record["state"] == "ALIVE" and record["class_name"] == "Counter"
    assert record["name"] == "watched" and record["pid"] == pid
    assert record["node_id"] in {n["NodeID"] for n in ray.nodes()}
    ray.kill(c)
    deadline = time.monotonic() + 30
    while state_api.get_actor(c._actor_id.hex())["state"] != "DEAD":
        assert time.monotonic() < deadline, state_api.get_actor(c._actor_id.hex())
        time.sleep(0.05)
    assert state_api.get_actor("ffffffffffffffff") is None
    assert state_api.get_actor(c._actor_id.hex()).state == "DEAD"  # Ray's records: attributes too


def test_list_actors_with_rays_filters(cluster):
    a = w.Counter.options(name="listed-a").remote()
    b = w.Counter.options(name="listed-b").remote()
    ray.get([a.get.remote(), b.get.remote()])
    ray.kill(b)
    deadline = time.monotonic() + 30
    while state_api.get_actor(b._actor_id.hex())["state"] != "DEAD":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    names = {r.name: r.state for r in state_api.list_actors()}
    assert names["listed-a"] == "ALIVE" and names["listed-b"] == "DEAD"
    alive = state_api.list_actors(filters=[("state", "=", "ALIVE")])
    assert "listed-a" in {r["name"] for r in alive} and "listed-b" not in {r["name"] for r in alive}
    assert [r.name for r in state_api.list_actors(filters=[("name", "=", "listed-b")])] == [
        "listed-b"]
    assert len(state_api.list_actors(limit=1)) == 1
    with pytest.raises(ValueError, match="not an actor state column"):
        state_api.list_actors(filters=[("colour", "=", "red")])
