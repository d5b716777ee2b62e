"""The Python fork server (python/troupe/_fork_server.py, PFS-1 and PFS-2; the agent's side in
src/agent/fork_server_choice.h): forked workers are exec'd workers' equals, unsafe preloads are
refused, a dead fork server costs a fallback to exec, python_preload reaches the workers."""

import os
import signal
import sys

import pytest

import troupe

PROBE = "fork_workers.Probe"
# Variables that name the worker itself (its agent sets them per worker) or that tell the agent
# how to start it (TROUPE_FORK_SERVER): the only ones two workers of one class differ by.
PER_WORKER = {"TROUPE_WORKER_NAME", "TROUPE_WORKER_UNIX", "TROUPE_CONTAINER",
              "TROUPE_CALL_STATUS", "TROUPE_PYTHON_STACKS", "TROUPE_PYTHON_STACKS_SIGNAL",
              "TROUPE_READY_FD", "TROUPE_TOKEN_FD", "TROUPE_FORK_SERVER"}


def snapshot(worker):
    worker.ready().result(timeout=60)
    return worker.call("snapshot").result(timeout=60)


def open_kinds(snap):
    """The kinds of a worker's open descriptors, sorted; a file by its suffix (".pystacks")."""
    return sorted(os.path.splitext(kind)[1] if kind.startswith("/") and kind != "/dev/null"
                  else kind for _, kind in snap["fds"])


def without(env):
    return {k: v for k, v in env.items() if k not in PER_WORKER}


def fork_servers(agent_pid):
    """Pids of the agent's children that are Python fork servers: their environment block says
    so (so does a forked worker's, FS-2), and they are in the agent's process group (a worker
    leads its own)."""
    out = []
    with open(f"/proc/{agent_pid}/task/{agent_pid}/children") as f:
        for pid in f.read().split():
            try:
                with open(f"/proc/{pid}/environ", "rb") as e:
                    if b"TROUPE_ROLE=forkserver" in e.read().split(b"\0") and \
                            os.getpgid(int(pid)) != int(pid):
                        out.append(int(pid))
            except OSError:
                pass
    return out


def test_forked_worker_is_an_exec_d_workers_equal():
    with troupe.Cluster(num_gpus_per_host=2, log_to_driver=False) as c:
        agent = c.hosts()[0]["agent_pid"]
        forked = snapshot(c.start_worker(PROBE, gpus=[1], env={"TROUPE_FORK_SERVER": "1"}))
        forked2 = snapshot(c.start_worker(PROBE, gpus=[1], env={"TROUPE_FORK_SERVER": "1"}))
        execd = snapshot(c.start_worker(PROBE, gpus=[1], env={"TROUPE_FORK_SERVER": "0"}))
        assert forked["forked"] and forked2["forked"] and not execd["forked"]
        assert len(fork_servers(agent)) == 1
        agent_cwd = os.readlink(f"/proc/{agent}/cwd")
        for s in (forked, execd):
            assert s["pgid"] == s["pid"]  # its own process group
            assert s["ppid"] == agent
            assert s["cwd"] == agent_cwd
            assert s["env"]["CUDA_VISIBLE_DEVICES"] == "1"
            assert s["c_env"]["CUDA_VISIBLE_DEVICES"] == "1"
            assert s["fds"][:3] == [(0, "/dev/null"), (1, "pipe"), (2, "pipe")]
        for field in ("umask", "sigblk", "sigign", "sigcgt", "argv", "path",
                      "stdout_line_buffering"):
            assert forked[field] == execd[field], field
        # The same open files (their numbers differ: an exec'd worker's ready pipe keeps the
        # agent's number, a forked one's is 3, FS-2).
        assert open_kinds(forked) == open_kinds(execd)
        assert without(forked["env"]) == without(execd["env"])
        assert without(forked["c_env"]) == without(execd["c_env"])
        assert forked["sigblk"] == "0000000000000000"
        # Its container marker (src/agent/containment.h) where /proc shows it: written into the
        # fork server's placeholder (FS-2: /proc/PID/environ is the fork server's block).
        with open(f"/proc/{forked['pid']}/environ", "rb") as f:
            shown = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        assert shown[b"TROUPE_CONTAINER"].decode() == forked["env"]["TROUPE_CONTAINER"]
        # Per-process random state: two forked workers draw differently.
        assert forked["random"] != forked2["random"]
        # PFS-2's one difference: what a forked worker inherited is frozen for the collector.
        assert forked["gc_frozen"] > 0 and execd["gc_frozen"] == 0
        # The class module imported the test module itself (nothing preloaded).
        assert not forked["preloaded_before_import"]
        assert forked["preload_imported_in"] == forked["pid"]


def test_python_preload_reaches_the_worker_before_its_class_module():
    with troupe.Cluster(log_to_driver=False, python_preload=["fork_preload_mod", "numpy"]) as c:
        agent = c.hosts()[0]["agent_pid"]
        a = snapshot(c.start_worker(PROBE))
        b = snapshot(c.start_worker(PROBE))
        servers = fork_servers(agent)
        assert a["forked"] and b["forked"] and len(servers) == 1
        assert a["preloaded_before_import"] and b["preloaded_before_import"]
        # Imported once, in the fork server, not again in the workers.
        assert a["preload_imported_in"] == b["preload_imported_in"] == servers[0]
        assert a["numpy_random"] != b["numpy_random"]  # numpy's global RNG reseeded per worker


def test_python_preload_names_are_checked():
    with pytest.raises(troupe.InvalidArgumentError, match="not a Python module name"):
        troupe.Cluster(log_to_driver=False, python_preload=["numpy", "no such,module"])
    with pytest.raises(ValueError, match="list of module names"):
        troupe.Cluster(log_to_driver=False, python_preload="numpy")


def test_preload_that_starts_a_thread_is_refused_and_workers_are_exec_d(capfd):
    with troupe.Cluster(log_to_driver=False, python_preload=["fork_thread_mod"]) as c:
        workers = [c.start_worker(PROBE) for _ in range(2)]
        snaps = [snapshot(w) for w in workers]
        assert not any(s["forked"] for s in snaps)
    err = capfd.readouterr().err
    refusals = [line for line in err.splitlines() if "not usable" in line]
    assert len(refusals) == 1, err
    assert "fork_thread_mod" in refusals[0] and "thread" in refusals[0]


@pytest.mark.parametrize("module, why", [("fork_cuda_mod", "CUDA is initialised"),
                                         ("fork_fd_mod", "left descriptors")])
def test_preload_that_initialises_cuda_or_keeps_a_file_is_refused(capfd, module, why):
    with troupe.Cluster(log_to_driver=False, python_preload=[module]) as c:
        assert not snapshot(c.start_worker(PROBE))["forked"]
    err = capfd.readouterr().err
    refusals = [line for line in err.splitlines() if "not usable" in line]
    assert len(refusals) == 1, err
    assert module in refusals[0] and why in refusals[0]


def test_dead_fork_server_costs_one_fallback_to_exec(capfd):
    with troupe.Cluster(log_to_driver=False) as c:
        agent = c.hosts()[0]["agent_pid"]
        first = snapshot(c.start_worker(PROBE))
        assert first["forked"]
        (server,) = fork_servers(agent)
        os.kill(server, signal.SIGKILL)
        later = [c.start_worker(PROBE) for _ in range(3)]
        snaps = [snapshot(w) for w in later]  # every start succeeds
        assert not any(s["forked"] for s in snaps)
    err = capfd.readouterr().err
    notes = [line for line in err.splitlines() if "not usable" in line]
    assert len(notes) == 1, err


def test_hung_fork_server_costs_one_fallback_to_exec(capfd):
    with troupe.Cluster(log_to_driver=False) as c:
        agent = c.hosts()[0]["agent_pid"]
        assert snapshot(c.start_worker(PROBE))["forked"]
        (server,) = fork_servers(agent)
        os.kill(server, signal.SIGSTOP)  # it answers nothing from now on
        later = [c.start_worker(PROBE) for _ in range(2)]
        snaps = [snapshot(w) for w in later]  # the first waits out the request's deadline
        assert not any(s["forked"] for s in snaps)
    err = capfd.readouterr().err
    notes = [line for line in err.splitlines() if "not usable" in line]
    assert len(notes) == 1 and "no answer" in notes[0], err


def test_class_with_its_own_interpreter_gets_its_own_fork_server(tmp_path):
    other = tmp_path / "python3"  # another interpreter path (as a venv's), the same program
    other.symlink_to(os.path.realpath(sys.executable))
    with troupe.Cluster(log_to_driver=False,
                        python_executables={"fork_workers.OtherProbe": str(other)}) as c:
        agent = c.hosts()[0]["agent_pid"]
        a = snapshot(c.start_worker(PROBE))
        b = snapshot(c.start_worker("fork_workers.OtherProbe"))
        assert a["forked"] and b["forked"]
        servers = fork_servers(agent)
        assert len(servers) == 2
        exes = sorted(os.readlink(f"/proc/{pid}/exe") for pid in servers)
        assert exes == [os.path.realpath(sys.executable)] * 2
        cmdlines = set()
        for pid in servers:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdlines.add(f.read().split(b"\0")[0])
        assert cmdlines == {os.fsencode(sys.executable), os.fsencode(str(other))}


def _gone(pid):
    """True once `pid` is no process or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_forked_worker_and_fork_server_die_with_their_agent():
    import time

    c = troupe.Cluster(log_to_driver=False)
    try:
        agent = c.hosts()[0]["agent_pid"]
        snap = snapshot(c.start_worker(PROBE))
        assert snap["forked"]
        (server,) = fork_servers(agent)
        os.kill(agent, signal.SIGKILL)  # PR_SET_PDEATHSIG SIGKILL (FS-3, FS-5), and containment
        deadline = time.monotonic() + 30
        while not (_gone(snap["pid"]) and _gone(server)):
            assert time.monotonic() < deadline, "the worker or fork server outlived its agent"
            time.sleep(0.01)
    finally:
        c.shutdown()


def _play_agent(kind):
    """What python/tests/fork_protocol_agent.py saw, playing an agent to a fork server."""
    import json
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    run = subprocess.run([sys.executable, os.path.join(here, "fork_protocol_agent.py"), kind],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _ran_as_worker(report):
    # The environment of the request reached it: TROUPE_ROLE "none" makes troupe._role exit 2.
    assert report["pid"] > 0
    assert report["exit"] == 2, report
    assert "TROUPE_ROLE is not set to 'agent' or 'worker'" in report["stderr"]


def test_fork_server_forks_each_valid_request_and_exits_when_the_agent_closes():
    seen = _play_agent("valid")
    assert seen["hello"] == 0
    _ran_as_worker(seen["first"])
    _ran_as_worker(seen["second"])
    assert seen["first"]["pid"] != seen["second"]["pid"]
    assert seen["server_exit"] == 0


@pytest.mark.parametrize("kind", ["bad_magic", "truncated_string", "missing_fds"])
def test_malformed_request_forks_nothing_and_ends_the_fork_server(kind):
    seen = _play_agent(kind)
    _ran_as_worker(seen["first"])  # served until then
    assert seen["second"] == {"pid": None, "stderr": ""}  # no answer, no worker wrote
    assert seen["server_exit"] == 0
