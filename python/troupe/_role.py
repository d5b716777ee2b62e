"""Entry point of the processes troupe starts from a Python driver: agents and Python workers.

Run as ``python -m troupe._role`` (or through the bootstrap in troupe._cluster) with
TROUPE_ROLE=agent or TROUPE_ROLE=worker in the environment, as troupe's agents set it, or
TROUPE_ROLE=forkserver: a Python fork server (troupe._fork_server), whose forked workers go on
here as workers.
"""

import faulthandler
import os
import sys

from troupe import _core


def main():
    """Runs the role named by TROUPE_ROLE and exits the process with its code."""
    if os.environ.get("TROUPE_ROLE") == "forkserver":
        from troupe import _fork_server  # only the fork server's process loads it

        _fork_server.serve()  # returns only in a worker it forked, whose environment is its own
    if os.environ.get("TROUPE_ROLE") == "worker":
        _core.install_python_classes()
        dumps = _core.enable_stack_dumps()  # `troupe stack`: every thread's Python stack
        if dumps is not None:
            fd, signum = dumps
            faulthandler.register(signum, file=fd, all_threads=True, chain=True)
    code = _core.run_role()
    if code < 0:
        sys.stderr.write("troupe._role: TROUPE_ROLE is not set to 'agent' or 'worker'\n")
        code = 2
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter teardown: the method thread may still hold Python objects.
    os._exit(code)


if __name__ == "__main__":
    main()
