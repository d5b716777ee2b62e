"""A Python driver on a standing cluster: a head and an agent started with the real `troupe start`
on loopback addresses, the driver connected by address (keyword and TROUPE_ADDRESS)."""

import os
import re
import secrets
import signal
import subprocess
import time

import pytest

import troupe

TROUPE_CLI = os.path.join(os.path.dirname(os.path.dirname(troupe.__file__)), "..", "troupe")


def _read_until(stream, pattern, timeout):
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen += line
        m = re.search(pattern, line)
        if m:
            return m
    raise AssertionError(f"no line matching {pattern!r} within {timeout} s; got:\n{seen}")


@pytest.fixture(scope="module")
def standing(tmp_path_factory):
    """(address, token): a head on 127.0.0.1 (any free port) and one agent, py-a, on
    127.0.0.9 with 2 CPUs, 2 GPUs and the custom resources tag_b (2) and disk.ssd (0.5), whose
    Python fork servers preload fork_preload_mod (python/tests); both stopped (SIGTERM, then SIGKILL) afterwards."""
    if not os.path.exists(TROUPE_CLI):
        pytest.skip(f"the troupe command is not built ({TROUPE_CLI})")
    tmp = tmp_path_factory.mktemp("standing")
    os.chmod(tmp, 0o700)
    token = secrets.token_hex(32)
    env = dict(os.environ, TMPDIR=str(tmp), TROUPE_TOKEN=token)
    procs = []
    try:
        head = subprocess.Popen(
            [TROUPE_CLI, "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
             "--port", "0"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        procs.append(head)
        address = _read_until(head.stderr, r"listening on (127\.0\.0\.1:\d+)", 20).group(1)
        agent = subprocess.Popen(
            [TROUPE_CLI, "start", "--address", address, "--block", "--node-ip-address",
             "127.0.0.9", "--host-name", "py-a", "--num-cpus", "2", "--num-gpus", "2",
             "--python-preload", "fork_preload_mod", "--resources", "tag_b=2,disk.ssd=0.5"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(agent)
        deadline = time.monotonic() + 20
        while True:
            out = subprocess.run([TROUPE_CLI, "status", "--address", address], env=env,
                                 capture_output=True, text=True, timeout=20).stdout
            if re.search(r"^  py-a .* up ", out, re.M):
                break
            assert time.monotonic() < deadline, f"the agent did not join:\n{out}"
            time.sleep(0.1)
        yield address, token
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_python_driver_connects_by_address(standing, monkeypatch):
    address, token = standing
    monkeypatch.setenv("TROUPE_TOKEN", token)
    monkeypatch.delenv("TROUPE_ADDRESS", raising=False)
    with troupe.Cluster(address=address) as cluster:
        hosts = cluster.hosts()
        assert [(h["name"], h["address"], h["gpu_ids"]) for h in hosts] == [
            ("py-a", "127.0.0.9", [0, 1])]
        vc = troupe.VirtualCluster(bundle_ct_per_node_list=[2], use_gpus=True,
                                   num_gpus_per_node=2, cluster=cluster)
        group = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.Rank"), name_prefix="stand")
        f = group.run_all_workers_single_data("env", ["RANK", "CUDA_VISIBLE_DEVICES",
                                                      "TROUPE_HOST_NAME"])
        assert group.get_all_worker_results(f) == [
            {"RANK": "0", "CUDA_VISIBLE_DEVICES": "0", "TROUPE_HOST_NAME": "py-a"},
            {"RANK": "1", "CUDA_VISIBLE_DEVICES": "1", "TROUPE_HOST_NAME": "py-a"},
        ]
        group.shutdown()
        vc.shutdown()


def test_troupe_address_redirects_an_unchanged_driver(standing, monkeypatch):
    address, token = standing
    monkeypatch.setenv("TROUPE_TOKEN", token)
    monkeypatch.setenv("TROUPE_ADDRESS", address)
    with troupe.Cluster(num_hosts=3) as cluster:  # the embedded request is redirected
        assert [h["name"] for h in cluster.hosts()] == ["py-a"]
        w = cluster.start_worker("workers.Rank", host=0, env={"RANK": "5"})
        assert w.call("who", x=1).result(30) == {"rank": 5, "x": 1, "y": None, "c": None}


def test_wrong_token_is_a_clear_error(standing, monkeypatch):
    address, _ = standing
    monkeypatch.setenv("TROUPE_TOKEN", "0" * 64)
    monkeypatch.delenv("TROUPE_ADDRESS", raising=False)
    with pytest.raises(troupe.TroupeError) as e:
        troupe.Cluster(address=address)
    assert address in str(e.value)


def test_standing_agent_forks_python_workers_with_its_python_preload(standing, monkeypatch):
    address, token = standing
    monkeypatch.setenv("TROUPE_TOKEN", token)
    with troupe.Cluster(address=address, log_to_driver=False) as cluster:
        # The first starts may be exec'd while the fork server imports (a standing agent waits
        # at most 250 ms for it); then every start is forked.
        for _ in range(100):
            w = cluster.start_worker("fork_workers.Probe")
            snap = w.call("snapshot").result(timeout=60)
            w.stop()
            if snap["forked"]:
                break
        assert snap["forked"]
        # The agent's own preload (`troupe start --python-preload`), imported in the fork server.
        assert snap["preloaded_before_import"]
        assert snap["preload_imported_in"] != snap["pid"]
