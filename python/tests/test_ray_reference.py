"""The reference worker-group layer (../shared/reference/worker_groups.py, unmodified) running on
troupe.ray, its results compared with troupe's native WorkerGroup for the same cases."""

import os
import sys

import pytest

import troupe
from troupe import ray

import ray_reference_support

REFERENCE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "reference",
                         "worker_groups.py")


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    if not os.path.exists(REFERENCE):
        pytest.skip(f"the reference is not here ({os.path.abspath(REFERENCE)})")
    root = str(tmp_path_factory.mktemp("refproject"))
    ray_reference_support.write(root, REFERENCE)
    saved_path = list(sys.path)
    sys.path.insert(0, root)
    saved = {k: v for k, v in sys.modules.items() if k == "ray" or k.startswith("ray.")}
    ray.install()
    os.environ["TEST_VAR"] = "v"
    try:
        from nemo_rl.distributed import worker_groups as ref
        from nemo_rl.distributed.named_sharding import NamedSharding
        from nemo_rl.distributed.virtual_cluster import RayVirtualCluster

        ray.init(_num_nodes=2, num_cpus=4)
        rvc = RayVirtualCluster([2, 2], use_gpus=False)
        ref_group = ref.RayWorkerGroup(rvc, ref.RayWorkerBuilder("refworkers.RayEcho"),
                                       name_prefix="ref",
                                       sharding_annotations=NamedSharding([[0, 1], [2, 3]],
                                                                          ["dp", "tp"]))
        nvc = troupe.VirtualCluster([2, 2], use_gpus=False)
        native = troupe.WorkerGroup(nvc, troupe.WorkerBuilder("refworkers.Echo"),
                                    name_prefix="native", env_vars={"TEST_VAR": "v"},
                                    sharding_annotations=troupe.NamedSharding([[0, 1], [2, 3]],
                                                                              ["dp", "tp"]))
        yield ref_group, native
        native.shutdown()
        nvc.shutdown()
        rvc.shutdown()
    finally:
        ray.shutdown()
        os.environ.pop("TEST_VAR", None)
        sys.path[:] = saved_path
        for k in [k for k in sys.modules if k == "ray" or k.startswith("ray.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _both(groups, method, *args, **kwargs):
    ref_group, native = groups
    out = []
    for g in (ref_group, native):
        f = getattr(g, method)(*args, **kwargs)
        # The reference returns a list of ObjectRefs from its run_all_workers_single_data and
        # _multiple_data (a MultiWorkerFuture from _sharded_data).
        out.append(ray.get(f) if isinstance(f, list) else g.get_all_worker_results(f))
    return out


def test_environment_and_configure_hook_match(groups):
    ref_result, native_result = _both(groups, "run_all_workers_single_data", "whoami")
    assert ref_result == native_result
    assert [r["RANK"] for r in ref_result] == ["0", "1", "2", "3"]
    assert {r["CONFIGURED"] for r in ref_result} == {"leader"}  # one worker per tied group
    assert {r["tag"] for r in ref_result} == {"configured"}
    assert {r["TEST_VAR"] for r in ref_result} == {"v"}


def test_dispatch_semantics_match(groups):
    ref_result, native_result = _both(groups, "run_all_workers_sharded_data", "echo",
                                      x=["a", "b"], in_sharded_axes=["dp"],
                                      replicate_on_axes=["tp"], output_is_replicated=["tp"])
    assert ref_result == native_result == [{"rank": 0, "x": "a", "y": None},
                                           {"rank": 2, "x": "b", "y": None}]
    ref_result, native_result = _both(groups, "run_all_workers_multiple_data", "echo",
                                      x=[1, 2, 3, 4], common_kwargs={"y": 9})
    assert ref_result == native_result
    assert [r["x"] for r in ref_result] == [1, 2, 3, 4]
    ref_result, native_result = _both(groups, "run_all_workers_single_data", "echo", x=5,
                                      run_rank_0_only_axes=["tp"])
    assert ref_result == native_result
    assert [r["rank"] for r in ref_result] == [0, 2]
    ref_group, native = groups
    assert ray.get(ref_group.run_single_worker_single_data("echo", 3, x=7)) == \
        native.run_single_worker_single_data("echo", 3, x=7).result() == \
        {"rank": 3, "x": 7, "y": None}


def test_recreate_keeps_the_rank(groups):
    ref_group, native = groups
    ref_group.recreate_worker(1)
    native.recreate_worker(1)
    ref_result, native_result = _both(groups, "run_all_workers_single_data", "whoami")
    assert ref_result == native_result
    assert ref_result[1]["RANK"] == "1"


def test_shutdown_with_cleanup_matches(groups):
    from troupe.ray import exceptions as rex

    ref_group, native = groups
    ref_workers = list(ref_group.workers)
    native_workers = native.workers
    assert ref_group.shutdown(cleanup_method="cleanup") is True
    assert native.shutdown(cleanup_method="cleanup") is True
    assert not any(w.alive() for w in native_workers)
    for w in ref_workers:  # the reference kills its actors: calls to them fail
        with pytest.raises(rex.RayActorError):
            ray.get(w.echo.remote(), timeout=20)
