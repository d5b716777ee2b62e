"""troupe.ray runtime_env keys that change how a worker starts, as Ray's: nsight (the worker runs
under `nsys profile` with Ray's flags; a stand-in `nsys` on PATH records them), working_dir and
py_modules (copied into the session, on sys.path, working_dir the cwd). Real processes."""

import os
import stat
import sys

import pytest

from troupe import ray
from troupe.ray import exceptions as rex

# A stand-in for Nsight Systems' CLI: records its pid and arguments, then execs the command
# after `profile` and its options (as nsys parses them: "-k v" or "--key=value").
STAND_IN = """#!/bin/sh
{ echo "pid=$$"; for a in "$@"; do echo "arg=$a"; done; } > "$NSYS_RECORD"
[ "$1" = profile ] && shift
while [ $# -gt 0 ]; do
  case "$1" in
    --*) shift ;;
    -*) shift 2 ;;
    *) break ;;
  esac
done
exec "$@"
"""


@ray.remote(num_cpus=0)
class Probe:
    def pid(self):
        return os.getpid()

    def where(self):
        return os.getcwd(), list(sys.path)

    def imports(self, *names):
        import importlib

        return [importlib.import_module(n).__file__ for n in names]

    def read(self, path):
        with open(path) as f:
            return f.read()


@ray.remote
def task_where():
    import wd_mod

    return os.getcwd(), wd_mod.VALUE


@ray.remote
def task_pid():
    return os.getpid()


@pytest.fixture
def fake_nsys(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    nsys = bindir / "nsys"
    nsys.write_text(STAND_IN)
    nsys.chmod(nsys.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bindir, tmp_path / "nsys-record.txt"


def _record(path):
    lines = path.read_text().splitlines()
    pid = int(lines[0][len("pid="):])
    return pid, [line[len("arg="):] for line in lines[1:]]


@pytest.fixture
def plain():
    info = ray.init(num_cpus=2, include_dashboard=False)
    yield info
    ray.shutdown()


def test_nsight_default_runs_the_actor_under_nsys_profile_with_rays_flags(plain, fake_nsys):
    bindir, record = fake_nsys
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "NSYS_RECORD": str(record)}
    a = Probe.options(runtime_env={"nsight": "default", "env_vars": env}).remote()
    pid = ray.get(a.pid.remote(), timeout=60)
    recorded_pid, args = _record(record)
    assert recorded_pid == pid  # the stand-in exec'd the worker: same process
    reports = os.path.join(plain["session_dir"], "logs", "nsight")
    # Ray's NSIGHT_DEFAULT_CONFIG, one-letter keys as "-k v", longer ones as "--key=value", the
    # report under the session's logs/nsight/ (the shell Ray uses strips the quotes of
    # 'worker_process_%p').
    assert args[:7] == ["profile", "-t", "cuda,cudnn,cublas,nvtx",
                        "-o", os.path.join(reports, "worker_process_%p"),
                        "--stop-on-exit=true", sys.executable]
    assert os.path.isdir(reports)
    ray.kill(a)


def test_nsight_dict_maps_each_key_to_a_flag(plain, fake_nsys):
    bindir, record = fake_nsys
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "NSYS_RECORD": str(record)}
    a = Probe.options(runtime_env={"nsight": {"t": "cuda,nvtx", "cuda-memory-usage": "true",
                                              "o": "mine"}, "env_vars": env}).remote()
    pid = ray.get(a.pid.remote(), timeout=60)
    recorded_pid, args = _record(record)
    assert recorded_pid == pid
    reports = os.path.join(plain["session_dir"], "logs", "nsight")
    assert args[:7] == ["profile", "-t", "cuda,nvtx", "--cuda-memory-usage=true",
                        "-o", os.path.join(reports, "mine"), sys.executable]
    ray.kill(a)


def test_nsight_without_nsys_on_path_fails_naming_nsys(plain, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    cls = ray.remote(num_cpus=0, runtime_env={"nsight": "default",
                                               "env_vars": {"PATH": str(empty)}})(
        Probe._troupe_ray_target)  # decorating succeeds
    with pytest.raises(rex.RuntimeEnvSetupError, match="`nsys`"):
        cls.remote()
    with pytest.raises(rex.RuntimeEnvSetupError, match="nsight config"):
        Probe.options(runtime_env={"nsight": "everything"}).remote()


def test_job_nsight_runs_task_workers_under_nsys(fake_nsys, tmp_path):
    bindir, record = fake_nsys
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "NSYS_RECORD": str(record)}
    info = ray.init(num_cpus=1, include_dashboard=False,
                    runtime_env={"nsight": {"t": "nvtx"}, "env_vars": env})
    try:
        pid = ray.get(task_pid.remote(), timeout=60)
        recorded_pid, args = _record(record)
        assert recorded_pid == pid
        assert args[:6] == ["profile", "-t", "nvtx", "-o",
                            os.path.join(info["session_dir"], "logs", "nsight",
                                         "worker_process_%p"), sys.executable]
    finally:
        ray.shutdown()
    with pytest.raises(rex.RuntimeEnvSetupError, match="`nsys`"):
        ray.init(num_cpus=1, runtime_env={"nsight": "default",
                                          "env_vars": {"PATH": str(tmp_path)}})
    assert not ray.is_initialized()


def test_nsight_on_a_task_is_refused_at_remote(plain):
    with pytest.raises(rex.NotSupportedError, match="nsight"):
        task_where.options(runtime_env={"nsight": "default"}).remote()


def _tree(tmp_path):
    wd = tmp_path / "project"
    (wd / "data").mkdir(parents=True)
    (wd / "wd_mod.py").write_text("VALUE = 'from working_dir'\n")
    (wd / "data" / "input.txt").write_text("hello\n")
    mods = tmp_path / "mods"
    (mods / "pm_pkg").mkdir(parents=True)
    (mods / "pm_pkg" / "__init__.py").write_text("NAME = 'pkg'\n")
    (mods / "pm_single.py").write_text("NAME = 'single'\n")
    return wd, mods


def test_job_working_dir_and_py_modules_reach_actors_and_tasks(tmp_path):
    wd, mods = _tree(tmp_path)
    info = ray.init(num_cpus=2, include_dashboard=False,
                    runtime_env={"working_dir": str(wd),
                                 "py_modules": [str(mods / "pm_pkg"), str(mods / "pm_single.py")]})
    try:
        res = os.path.join(info["session_dir"], "runtime_resources")
        a = Probe.remote()
        cwd, path = ray.get(a.where.remote(), timeout=60)
        # a copy in the session, not the directory itself
        assert cwd.startswith(os.path.join(res, "working_dir_files") + os.sep)
        assert os.path.realpath(cwd) != os.path.realpath(wd)
        assert ray.get(a.read.remote("data/input.txt")) == "hello\n"
        files = ray.get(a.imports.remote("wd_mod", "pm_pkg", "pm_single"))
        assert files[0] == os.path.join(cwd, "wd_mod.py")
        assert files[1].startswith(os.path.join(res, "py_modules_files") + os.sep)
        assert files[1].endswith(os.path.join("pm_pkg", "__init__.py"))
        assert files[2].startswith(os.path.join(res, "py_modules_files") + os.sep)
        # Ray's order on sys.path: the py_modules, then the working_dir
        entries = [os.path.dirname(os.path.dirname(files[1])), os.path.dirname(files[2]), cwd]
        assert [p for p in path if p in entries] == entries
        tcwd, value = ray.get(task_where.remote(), timeout=60)
        assert tcwd == cwd and value == "from working_dir"
        ray.kill(a)
        # one snapshot per session, as Ray uploads the job's once: later edits stay out
        (wd / "data" / "input.txt").write_text("edited\n")
        b = Probe.remote()
        assert ray.get(b.read.remote("data/input.txt"), timeout=60) == "hello\n"
        ray.kill(b)
    finally:
        ray.shutdown()


def test_actor_working_dir_and_py_modules(plain, tmp_path):
    wd, mods = _tree(tmp_path)
    a = Probe.options(runtime_env={"working_dir": str(wd),
                                   "py_modules": [str(mods / "pm_single.py")]}).remote()
    files = ray.get(a.imports.remote("wd_mod", "pm_single"), timeout=60)
    cwd, _ = ray.get(a.where.remote())
    assert files[0] == os.path.join(cwd, "wd_mod.py")
    assert "py_modules_files" in files[1]
    ray.kill(a)
    with pytest.raises(ValueError, match="working_dir"):
        Probe.options(runtime_env={"working_dir": str(tmp_path / "missing")}).remote()
    with pytest.raises(ValueError, match="py_modules"):
        Probe.options(runtime_env={"py_modules": [str(tmp_path / "missing.txt")]}).remote()


def test_init_refuses_a_missing_working_dir(tmp_path):
    with pytest.raises(ValueError, match="working_dir"):
        ray.init(num_cpus=1, runtime_env={"working_dir": str(tmp_path / "missing")})
    assert not ray.is_initialized()
