"""The environment, configure_worker, errors, worker death and recreate_worker, from Python."""

import os
import time

import pytest

import troupe

T = 60


@pytest.fixture(scope="module")
def group(vc):
    g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.Rank"), workers_per_node=1,
                           name_prefix="errs", env_vars={"GROUP_VAR": "g"},
                           sharding_annotations=troupe.NamedSharding([0, 1], ["dp"]))
    yield g
    g.shutdown()


def test_environment(group):
    names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
             "GROUP_VAR", "TROUPE_WORKER_GROUP", "CUDA_VISIBLE_DEVICES"]
    envs = group.get_all_worker_results(group.run_all_workers_single_data("env", names))
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert [e["WORLD_SIZE"] for e in envs] == ["2", "2"]
    # workers_per_node=1: worker i is bundle 0 of placement group (node) i.
    assert [e["NODE_RANK"] for e in envs] == ["0", "1"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "0"]
    assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"] == "127.0.0.2"  # rank 0's host
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]
    assert 1400 <= int(envs[0]["MASTER_PORT"]) < 5400  # VirtualClusterOptions' default range
    assert [e["GROUP_VAR"] for e in envs] == ["g", "g"]
    assert envs[0]["TROUPE_WORKER_GROUP"] == group.name
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == ""  # no GPUs


def test_driver_environment_is_copied_at_group_creation(vc):
    os.environ["DRIVER_VAR"] = "before"
    try:
        g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.Rank"), workers_per_node=1,
                               name_prefix="envcopy")
        os.environ["DRIVER_VAR"] = "after"
        assert g.run_single_worker_single_data("env", 0, ["DRIVER_VAR"]).result(T) == \
            {"DRIVER_VAR": "before"}
        g.shutdown()
    finally:
        del os.environ["DRIVER_VAR"]


def test_configure_worker_is_honoured():
    with troupe.VirtualCluster([2], use_gpus=True, num_gpus_per_node=2, name="cfg") as vc:
        g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.Configured"),
                               bundle_indices_list=[(0, [0, 1])])
        facts = g.get_all_worker_results(g.run_all_workers_single_data("facts"))
        # One tied group of 2: worker 0 owns the model (gets bundle_indices), worker 1 does not;
        # single_data returns from every called worker. The hook asked for 0 GPUs, so neither
        # sees a device; its init_kwargs reach the constructor.
        assert facts == [
            {"greeting": "from-hook", "CONFIGURED": "gpus=1.0 owner=True", "CUDA_VISIBLE_DEVICES": ""},
            {"greeting": "from-hook", "CONFIGURED": "gpus=1.0 owner=False", "CUDA_VISIBLE_DEVICES": ""},
        ]
        g.shutdown()


def test_method_error_carries_type_message_and_traceback(group):
    with pytest.raises(troupe.MethodFailedError) as e:
        group.run_single_worker_single_data("fail", 1, "bad value").result(T)
    assert e.value.remote_type == "ValueError"
    assert e.value.remote_message == "bad value"
    assert "in fail" in e.value.remote_traceback and "workers.py" in e.value.remote_traceback
    assert "errs-1" in str(e.value)  # names the worker


def test_unknown_method(group):
    with pytest.raises(troupe.UnknownMethodError, match="who"):  # lists the methods
        group.run_single_worker_single_data("nope", 0).result(T)


def test_constructor_failure(vc):
    with pytest.raises(troupe.ConstructorFailedError) as e:
        troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.BadInit"), workers_per_node=1,
                           name_prefix="bad")
    assert e.value.remote_type == "RuntimeError" and "no thanks" in str(e.value)


def test_unknown_class(vc):
    with pytest.raises(troupe.TroupeError, match="no_such_module"):
        troupe.WorkerGroup(vc, troupe.WorkerBuilder("no_such_module.Class"), workers_per_node=1,
                           name_prefix="unknown")


def test_worker_death_and_recreate(vc):
    g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.Rank"), workers_per_node=1,
                           name_prefix="death")
    old_pid = g.run_single_worker_single_data("pid", 1).result(T)
    with pytest.raises(troupe.WorkerDiedError, match="death-1"):
        g.run_single_worker_single_data("die", 1).result(T)
    with pytest.raises(troupe.WorkerDiedError):  # later calls fail too
        g.run_single_worker_single_data("pid", 1).result(T)
    assert g.run_single_worker_single_data("pid", 0).result(T) > 0  # the other goes on
    g.recreate_worker(1)
    new_pid = g.run_single_worker_single_data("pid", 1).result(T)
    assert new_pid != old_pid
    assert g.run_single_worker_single_data("who", 1, x=1).result(T)["rank"] == 1
    assert g.restarts(1) == 1
    g.shutdown()


def wait_for_file(path, timeout=T):
    """Waits until `path` exists (the worker's signal that its method has begun)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


def test_worker_answers_while_python_holds_the_gil(tmp_path):
    with troupe.Cluster(1, num_cpus_per_host=2) as cluster:
        w = cluster.start_worker("workers.Echo")
        w.ready().result(T)
        started = str(tmp_path / "spinning")
        busy = w.call("spin", 30.0, started)
        wait_for_file(started)  # the method thread now holds the GIL
        assert not busy.done()
        # SIGTERM is handled by the worker's I/O thread, which never waits for the GIL: the
        # worker exits cleanly at once although its method thread spins in Python.
        start = time.monotonic()
        how = w.stop(grace=20.0)
        assert how == "exit code 0", how
        assert time.monotonic() - start < 10
        with pytest.raises(troupe.WorkerDiedError):
            busy.result(T)


def test_worker_answers_pings_while_a_method_holds_the_gil(tmp_path):
    # The method thread serves the worker's I/O while idle (ML-2 in src/worker/method_loop.h);
    # while a method holds the GIL the I/O thread takes the I/O over (ML-3) and answers at once.
    with troupe.Cluster(1, num_cpus_per_host=2) as cluster:
        w = cluster.start_worker("workers.Echo")
        w.ready().result(T)
        for i in range(3):  # the hand-over works every time, not once
            started = str(tmp_path / f"spinning-{i}")
            busy = w.call("spin", 2.0, started)
            wait_for_file(started)  # the method thread now holds the GIL
            start = time.monotonic()
            assert w.call("__ping__").result(T)["pid"] == w.pid
            assert time.monotonic() - start < 1.0
            assert not busy.done()
            assert busy.result(T) > 0
            assert w.call("echo", "after").result(T) == "after"


def test_help_is_useful():
    assert "sharded" in troupe.WorkerGroup.run_all_workers_sharded_data.__doc__
    for name in troupe.__all__:
        assert getattr(troupe, name).__doc__, name


def test_calls_right_behind_the_constructor_wait_for_it():
    with troupe.Cluster(1, num_cpus_per_host=2) as cluster:
        w = cluster.start_worker("workers.Echo", "slow start")
        # Sent without waiting for ready(): queued by the worker until its object exists.
        futures = [w.call("echo", i) for i in range(5)]
        assert troupe.gather(futures, timeout=T) == [0, 1, 2, 3, 4]
        assert w.call("init_args").result(T) == [["slow start"], {}]


def test_a_class_can_have_its_own_interpreter(tmp_path):
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text('#!/bin/sh\nexport VIA_WRAPPER=yes\nexec /usr/bin/python3 "$@"\n')
    wrapper.chmod(0o755)
    with troupe.Cluster(1, num_cpus_per_host=2,
                        python_executables={"workers.Echo": str(wrapper)}) as cluster:
        own = cluster.start_worker("workers.Echo")
        other = cluster.start_worker("workers.Rank", name="plain", env={"RANK": "0"})
        assert own.call("echo", 1).result(T) == 1
        assert other.call("env", ["VIA_WRAPPER"]).result(T) == {"VIA_WRAPPER": None}
        with open(f"/proc/{own.pid}/environ", "rb") as f:  # the wrapper exec'd the worker
            assert b"VIA_WRAPPER=yes" in f.read().split(b"\0")
