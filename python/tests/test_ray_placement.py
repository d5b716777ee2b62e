"""troupe.ray placement groups, scheduling strategies, cluster views and install() (real
processes: an embedded cluster of 2 simulated hosts, 2 CPUs and 2 declared GPUs each)."""

import sys

import pytest

from troupe import ray
from troupe.ray import exceptions as rex
from troupe.ray.util.placement_group import (placement_group, placement_group_table,
                                             remove_placement_group)
from troupe.ray.util.scheduling_strategies import (NodeAffinitySchedulingStrategy,
                                                   PlacementGroupSchedulingStrategy)

import ray_workers as w


@pytest.fixture(scope="module")
def cluster():
    ray.init(_num_nodes=2, num_cpus=2, num_gpus=2)
    yield
    ray.shutdown()


def _in_bundle(pg, i, **opts):
    return w.where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=i), **opts)


def test_strict_spread_puts_each_bundle_on_its_own_node(cluster):
    pg = placement_group([{"CPU": 1, "GPU": 1}] * 2, strategy="STRICT_SPREAD", name="spread")
    assert ray.get(pg.ready(), timeout=10) == pg  # as Ray: the ready ref's value is the group
    assert pg.bundle_count == 2 and pg.bundle_specs == [{"CPU": 1, "GPU": 1}] * 2
    table = placement_group_table(pg)
    assert table["state"] == "CREATED" and table["strategy"] == "STRICT_SPREAD"
    assert len(set(table["bundles_to_node_id"].values())) == 2
    seen = ray.get([_in_bundle(pg, i, num_cpus=0, num_gpus=0.01).remote() for i in range(2)])
    ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    for i, (ip, gpus, cuda, node_id) in enumerate(seen):
        assert node_id == table["bundles_to_node_id"][i]
        assert ip == ips[node_id]            # the task runs on its bundle's host
        assert len(gpus) == 1 and cuda == str(gpus[0])
    remove_placement_group(pg)


def _settled():
    """available_resources() once finished tasks gave their CPUs back (tasks release on the
    runtime's dispatcher thread after their result arrives)."""
    import time

    total = ray.cluster_resources()["CPU"]
    deadline = time.monotonic() + 10
    while ray.available_resources().get("CPU", 0) != total:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.01)
    return ray.available_resources()


def test_strict_pack_and_resources_taken_and_given_back(cluster):
    before = _settled()
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
    assert pg.wait(10)
    nodes = set(placement_group_table(pg)["bundles_to_node_id"].values())
    assert len(nodes) == 1
    assert ray.available_resources()["CPU"] == before["CPU"] - 2
    remove_placement_group(pg)
    assert ray.available_resources()["CPU"] == before["CPU"]
    assert placement_group_table(pg)["state"] == "REMOVED"


def test_infeasible_group_stays_pending(cluster):
    pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")  # 3 nodes needed, 2 exist
    assert pg.wait(0.3) is False
    assert placement_group_table(pg)["state"] == "PENDING"
    with pytest.raises(rex.GetTimeoutError):
        ray.get(pg.ready(), timeout=0.2)
    remove_placement_group(pg)


def test_actor_in_a_bundle_and_bad_bundle_index(cluster):
    pg = placement_group([{"CPU": 1, "GPU": 1}], strategy="PACK")
    ray.get(pg.ready())
    a = w.Counter.options(num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, 0, placement_group_capture_child_tasks=True)).remote()
    ip, gpus, cuda, actor_id = ray.get(a.where.remote())
    node_id = placement_group_table(pg)["bundles_to_node_id"][0]
    assert ip == {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}[node_id]
    assert len(gpus) == 1 and actor_id
    bad = _in_bundle(pg, 5).remote()
    with pytest.raises(rex.PlacementGroupSchedulingError, match="out of range"):
        ray.get(bad, timeout=10)
    remove_placement_group(pg)
    with pytest.raises(rex.RayActorError):
        ray.get(a.get.remote(), timeout=20)  # removing the group killed its actor


def test_node_affinity_and_spread(cluster):
    second = ray.nodes()[1]
    ip, *_ = ray.get(w.where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        second["NodeID"], soft=False)).remote())
    assert ip == second["NodeManagerAddress"]
    ips = ray.get([w.where.options(scheduling_strategy="SPREAD").remote() for _ in range(4)])
    assert len({i[0] for i in ips}) == 2


def test_install_makes_import_ray_resolve_to_troupe_ray(cluster):
    saved = {k: v for k, v in sys.modules.items() if k == "ray" or k.startswith("ray.")}
    try:
        ray.install()
        import ray as real_name
        from ray._private.services import get_node_ip_address
        from ray.util.placement_group import PlacementGroup
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy as S

        assert real_name is ray and S is PlacementGroupSchedulingStrategy
        assert PlacementGroup is ray.util.PlacementGroup
        assert get_node_ip_address() == ray.nodes()[0]["NodeManagerAddress"]
    finally:
        for k in [k for k in sys.modules if k == "ray" or k.startswith("ray.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_group_resources_are_listed_as_rays(cluster):
    pg = placement_group([{"CPU": 1, "GPU": 1}, {"CPU": 1}], strategy="PACK")
    ray.get(pg.ready(), timeout=30)
    pid = pg.id.hex()
    total = ray.cluster_resources()
    assert total["CPU"] == 4 and total["GPU"] == 4  # the nodes' totals do not change
    assert {k: v for k, v in total.items() if k.endswith(pid)} == {
        f"CPU_group_{pid}": 2.0, f"CPU_group_0_{pid}": 1.0, f"CPU_group_1_{pid}": 1.0,
        f"GPU_group_{pid}": 1.0, f"GPU_group_0_{pid}": 1.0,
        f"bundle_group_{pid}": 2000.0, f"bundle_group_0_{pid}": 1000.0,
        f"bundle_group_1_{pid}": 1000.0}
    actor = w.Counter.options(num_cpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(
        pg, 1)).remote()
    ray.get(actor.get.remote(), timeout=30)  # placed in bundle 1: its CPU is taken
    free = ray.available_resources()
    assert f"CPU_group_1_{pid}" not in free and free[f"CPU_group_{pid}"] == 1.0
    assert free[f"CPU_group_0_{pid}"] == 1.0
    ray.kill(actor)
    remove_placement_group(pg)
    assert not any(k.endswith(pid) for k in ray.cluster_resources())
