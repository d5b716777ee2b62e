"""torch.distributed as a real client: gloo rendezvous through MASTER_ADDR/MASTER_PORT."""

import threading

import pytest

import troupe

torch = pytest.importorskip("torch")

T = 150
LAYOUT = [[0, 1], [2, 3]]  # dp=2 x tp=2


def make_group(vc, prefix):
    return troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.TorchRank"), name_prefix=prefix,
                              sharding_annotations=troupe.NamedSharding(LAYOUT, ["dp", "tp"]),
                              env_vars={"GLOO_SOCKET_IFNAME": "lo"})


def check(results):
    # Ranks 0..3 contribute 1..4: every rank holds 10 after the all-reduce.
    assert [(r["rank"], r["world"], r["sum"]) for r in results] == \
        [(0, 4, 10.0), (1, 4, 10.0), (2, 4, 10.0), (3, 4, 10.0)]
    assert len({r["port"] for r in results}) == 1
    return results[0]["port"]


def test_all_reduce_then_two_groups_at_once():
    # 2 simulated hosts with 2 bundles each; two groups may share them.
    with troupe.VirtualCluster([2, 2], use_gpus=False, max_colocated_worker_groups=2,
                               name="torch") as vc:
        g = make_group(vc, "ta")
        first = check(g.get_all_worker_results(g.run_all_workers_single_data("all_reduce"),
                                               timeout=T))
        g.shutdown()
        g = make_group(vc, "tb")  # one after the other
        check(g.get_all_worker_results(g.run_all_workers_single_data("all_reduce"), timeout=T))
        g.shutdown()

        # At the same time: both rendezvous concurrently on distinct MASTER_PORTs.
        groups = [make_group(vc, "tc"), make_group(vc, "td")]
        futures = [x.run_all_workers_single_data("all_reduce") for x in groups]
        ports = [check(x.get_all_worker_results(f, timeout=T)) for x, f in zip(groups, futures)]
        assert ports[0] != ports[1]
        for x in groups:
            x.shutdown()
        assert first > 0
