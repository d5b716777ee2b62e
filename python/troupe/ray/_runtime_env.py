"""runtime_env keys that change how a worker is launched, as Ray's:

- nsight: "default" or a dict of `nsys profile` flags: the worker runs under
  ``nsys profile FLAGS python ...`` (Ray's ray/_private/runtime_env/nsight.py mapping: a
  one-letter key is ``-k value``, a longer one ``--key=value``; the report "o" goes under the
  session's logs/nsight/). `nsys` must be on the worker's PATH (RuntimeEnvSetupError otherwise).
- working_dir: a local directory, copied once into the session directory
  (runtime_resources/working_dir_files/); the copy is the worker's cwd and on its sys.path.
- py_modules: local package directories, .py files or imported modules, each copied into its
  own directory under runtime_resources/py_modules_files/, which goes on sys.path (before the
  working_dir, as Ray orders them).

The driver computes a worker's launch (launch()); the worker applies the paths before it
imports the user's class (apply_in_worker(), from troupe.ray._host). The copies live in the
driver's session directory: workers on another machine need it on a shared filesystem.
"""

import copy
import hashlib
import os
import shlex
import shutil
import sys
import threading

import troupe
from troupe.ray import exceptions as rex

# Ray's NSIGHT_DEFAULT_CONFIG (runtime_env={"nsight": "default"})
NSIGHT_DEFAULT = {"t": "cuda,cudnn,cublas,nvtx", "o": "'worker_process_%p'",
                  "stop-on-exit": "true"}
SETUP_KEY = "runtime_env_setup"  # in a worker's start-up context: {"cwd", "sys_path"}

_lock = threading.Lock()
_staged = {}  # (session dir, kind, source path) -> copied path


def effective(job_env, own):
    """The runtime_env a worker gets: the job's (ray.init) with the actor's keys over it
    (env_vars merged key by key), as Ray merges them."""
    out = dict(job_env or {})
    for k, v in (own or {}).items():
        if k == "env_vars":
            out[k] = dict(out.get(k) or {}, **(v or {}))
        else:
            out[k] = v
    return out


def _module_path(mod):
    if isinstance(mod, (str, os.PathLike)):
        return os.path.abspath(os.fspath(mod))
    f = getattr(mod, "__file__", None)
    if f is None:
        raise ValueError(f"runtime_env py_modules: {mod!r} is neither a path nor a module with "
                         "a __file__")
    if os.path.basename(f) == "__init__.py":
        return os.path.dirname(os.path.abspath(f))
    return os.path.abspath(f)


def validate_paths(renv, where):
    """ValueError (as Ray's) for a working_dir that is not a directory or a py_modules entry
    that is neither a directory nor a .py file."""
    renv = renv or {}
    wd = renv.get("working_dir")
    if wd is not None:
        if not isinstance(wd, (str, os.PathLike)) or not os.path.isdir(wd):
            raise ValueError(f"{where}: runtime_env working_dir {wd!r} is not a valid path (a "
                             "local directory)")
    mods = renv.get("py_modules")
    if mods is not None:
        if isinstance(mods, (str, bytes)) or not isinstance(mods, (list, tuple)):
            raise TypeError(f"{where}: runtime_env py_modules must be a list, not "
                            f"{type(mods).__name__}")
        for m in mods:
            p = _module_path(m)
            if not (os.path.isdir(p) or (os.path.isfile(p) and p.endswith(".py"))):
                raise ValueError(f"{where}: runtime_env py_modules entry {m!r} is not a valid "
                                 "path (a local directory or .py file)")
    nsight = renv.get("nsight", renv.get("_nsight"))
    if nsight is not None and not isinstance(nsight, dict) and nsight != "default":
        raise rex.RuntimeEnvSetupError(f"{where}: unsupported nsight config {nsight!r}: use "
                                       "'default' or a dict of nsys profile options")


def nsight_flags(config, report_dir):
    """The `nsys profile` command line Ray runs a worker under for nsight `config`, split as
    its shell would split it (Ray joins it into a shell command)."""
    config = copy.deepcopy(NSIGHT_DEFAULT if config == "default" else dict(config))
    config["o"] = os.path.join(report_dir, config.get("o", NSIGHT_DEFAULT["o"]))
    cmd = ["nsys", "profile"]
    for option, value in config.items():
        if len(option) > 1:
            cmd.append(f"--{option}={value}")
        else:
            cmd += [f"-{option}", str(value)]
    return shlex.split(" ".join(cmd))


def _signature(path):
    h = hashlib.sha1(path.encode())
    if os.path.isfile(path):
        st = os.stat(path)
        h.update(f"{st.st_size}/{st.st_mtime_ns}".encode())
        return h.hexdigest()[:16]
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            h.update(f"{os.path.relpath(p, path)}/{st.st_size}/{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _stage(session_dir, kind, src):
    """Copies `src` under session_dir/runtime_resources/<kind>_files/ on its first use in the
    session (later workers share that snapshot, as Ray's job-level upload); returns the
    directory to use (the copy of a working_dir; the parent of a module's)."""
    key = (session_dir, kind, src)
    with _lock:
        if key in _staged:
            return _staged[key]
        sig = _signature(src)
        dest = os.path.join(session_dir, "runtime_resources", f"{kind}_files",
                            f"_troupe_pkg_{sig}")
        if not os.path.exists(dest):
            tmp = f"{dest}.tmp{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            if kind == "working_dir":
                shutil.copytree(src, tmp, symlinks=True)
            else:
                os.makedirs(tmp)
                target = os.path.join(tmp, os.path.basename(src))
                if os.path.isdir(src):
                    shutil.copytree(src, target, symlinks=True)
                else:
                    shutil.copy2(src, target)
            os.rename(tmp, dest)
        _staged[key] = dest
        return dest


def _find_nsys(worker_env, where):
    path = (worker_env or {}).get("PATH", os.environ.get("PATH", os.defpath))
    nsys = shutil.which("nsys", path=path)
    if nsys is None:
        raise rex.RuntimeEnvSetupError(
            f"{where}: runtime_env nsight needs Nsight Systems' `nsys` on the worker's PATH, "
            f"and there is none (PATH={path}): install it, or drop nsight")
    return nsys


def check_nsys(renv, where):
    """RuntimeEnvSetupError at .remote() when `renv` asks nsight and no `nsys` is on PATH."""
    _find_nsys(renv.get("env_vars"), where)


def launch(runtime, own_env, worker_env, where="runtime_env"):
    """({SETUP_KEY: ...} or {}, launch wrapper) of a worker of `runtime` whose own runtime_env
    is `own_env` (None: the job's only) and whose environment is `worker_env` (for PATH)."""
    renv = effective(getattr(runtime, "job_runtime_env", None), own_env)
    validate_paths(renv, where)
    session_dir = runtime.cluster.session_dir
    setup = {}
    sys_path = [_stage(session_dir, "py_modules", _module_path(m))
                for m in renv.get("py_modules") or ()]
    if renv.get("working_dir") is not None:
        wd = _stage(session_dir, "working_dir", os.path.abspath(os.fspath(renv["working_dir"])))
        sys_path.append(wd)
        setup["cwd"] = wd
    if sys_path:
        setup["sys_path"] = sys_path
    wrapper = []
    nsight = renv.get("nsight", renv.get("_nsight"))
    if nsight:
        nsys = _find_nsys(worker_env, where)
        report_dir = os.path.join(session_dir, "logs", "nsight")
        os.makedirs(report_dir, exist_ok=True)
        wrapper = [nsys] + nsight_flags(nsight, report_dir)[1:]
    return ({SETUP_KEY: setup} if setup else {}), wrapper


def apply_in_worker(setup):
    """In the worker, before the user's code is imported: py_modules and working_dir on
    sys.path, the working_dir as cwd."""
    if not setup:
        return
    for p in reversed(setup.get("sys_path") or ()):
        if p not in sys.path:
            sys.path.insert(0, p)
    if setup.get("cwd"):
        os.chdir(setup["cwd"])


def host_class(kind, py_executable):
    """The troupe class name of a host kind (ActorHost, TaskHost); with a py_executable, an
    alias of it mapped to that interpreter (troupe.set_python_executable)."""
    name = f"troupe.ray._host.{kind}"
    if not py_executable or py_executable == sys.executable:
        return name
    if not os.path.exists(py_executable):
        raise rex.RuntimeEnvSetupError(f"runtime_env py_executable {py_executable!r} does not "
                                       "exist")
    alias = f"{name}__py_{hashlib.sha1(py_executable.encode()).hexdigest()[:12]}"
    troupe.set_python_executable(alias, py_executable)
    return alias
