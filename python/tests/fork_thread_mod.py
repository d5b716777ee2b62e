"""A module that is unsafe to preload (test_fork_server.py): it starts a thread at import."""

import threading

_stop = threading.Event()
threading.Thread(target=_stop.wait, name="fork-thread-mod", daemon=True).start()
