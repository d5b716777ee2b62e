"""A module that is unsafe to preload (test_fork_server.py): it keeps a file open."""

_kept = open(__file__, "rb")  # noqa: SIM115 -- held open on purpose
