"""A module for python_preload tests (test_fork_server.py): records the process that ran it."""

import os

IMPORTED_IN_PID = os.getpid()
