"""The driver's state of one Ray actor: its troupe worker, its calls in submission order, its
restarts and its death. Calls made before the actor runs, or with ObjectRef arguments that are
not ready, wait in a queue drained in order (so calls to one actor run as submitted). A call with
retries (max_task_retries, retry_exceptions) that failed goes back to the front of the queue:
after its actor's restart when the actor died, at once when it raised a retried exception."""

import collections
import threading

import troupe
from troupe.ray import _cells, _objects, _serial
from troupe.ray import exceptions as rex
from troupe.ray._serial import is_plain


def top_level_refs(args, kwargs):
    return [a for a in list(args) + list(kwargs.values()) if isinstance(a, _objects.ObjectRef)]


def resolve_refs(args, kwargs):
    """args and kwargs with each top-level ObjectRef replaced by its value (they are done), or
    by its StoredValue (a large ray.put value: it travels as references to the object store);
    raises the error of a failed one."""
    def value(a):
        if not isinstance(a, _objects.ObjectRef):
            return a
        return a._stored if a._stored is not None else a._result(0)

    return [value(a) for a in args], {k: value(v) for k, v in kwargs.items()}


# A call's method name carries an explicit concurrency group as "method@group" to the host.
GROUP_SEPARATOR = "@"

# A call's failure that means its actor's worker died (then it is retried after the restart).
_DEATHS = (troupe.WorkerDiedError, troupe.ConnectionLostError, troupe.HostLostError,
           troupe.OutOfMemoryError)


class RetriedCall:
    """A call with retries left (Ray's max_task_retries on actors; -1: no limit): its cell is
    completed by the attempt that is not retried. Its state is the actor's lock's."""

    def __init__(self, cell, seq, retries, retry_exceptions):
        self.cell = cell
        self.seq = seq  # submission order: retries go back in it
        self.retries_left = retries
        self.retry_exceptions = retry_exceptions
        self.dead_worker = None  # the worker its last attempt died with: wait for another

    def wants_retry(self, attempt):
        """Whether the done troupe.Future `attempt` is retried: the worker died, or it raised an
        exception that retry_exceptions names."""
        if self.retries_left == 0:
            return False
        try:
            raw = attempt.result(0)
        except _DEATHS:
            return True
        except troupe.TroupeError:
            return False
        return _cells.raised_retried(raw, self.retry_exceptions)


class ActorState:
    """See the module docstring. `runtime` provides post(fn), start_actor(actor) and
    actor_died(actor, worker, how)."""

    def __init__(self, runtime, actor_id, spec, cls_name, methods, options, args, kwargs):
        self.runtime = runtime
        self.actor_id = actor_id
        self.spec = spec
        self.cls_name = cls_name
        self.methods = methods  # name -> (is_generator, is_async, num_returns)
        self.options = options
        self.args, self.kwargs = args, kwargs
        self.is_async = any(m[1] for m in methods.values())
        self.use_async_path = (self.is_async or int(options.get("max_concurrency") or 1) > 1
                               or bool(options.get("concurrency_groups")))
        self.restarts_left = int(options.get("max_restarts") or 0)
        self.name = options.get("name")
        self.namespace = options.get("namespace")
        self.lock = threading.Lock()
        self.worker = None
        self.queue = collections.deque()
        self.dead = None  # the RayActorError once dead for good
        self.no_restart = False
        self.allocation = None
        self.incarnation = 0
        self.node = None
        # Lifetime (Ray's reference counting, driver-side): `escaped` once a handle left the
        # driver or a streaming call was made (then only ray.kill or shutdown ends it);
        # `collecting` once the driver's last handle is gone, `ending` once collect() has
        # decided to stop it; `sent` holds the futures of calls sent, so that collection waits
        # for the ones still running.
        self.escaped = False
        self.collecting = False
        self.ending = False
        self.sent = collections.deque()
        self.calls_submitted = 0  # the seq of RetriedCall
        self.open_retried = 0  # RetriedCalls not completed: collection waits for them too

    # -- errors --------------------------------------------------------------------------
    def error_of(self, e):
        """The Ray error for a troupe error of a call to this actor."""
        if isinstance(e, troupe.TimeoutError):
            return rex.GetTimeoutError(str(e))
        if isinstance(e, troupe.ConstructorFailedError):
            return rex.ActorDiedError(self.actor_id, f"The actor {self.cls_name} died because "
                                      f"of an error raised in its creation task: {e.message}")
        return rex.ActorDiedError(self.actor_id, f"The actor {self.cls_name} "
                                  f"({self.actor_id}) died: {e}")

    # -- calls ---------------------------------------------------------------------------
    def retry_policy(self, retry):
        """(retries, retry_exceptions) of a call with method options `retry`
        (_options.method_retry), the actor's max_task_retries where it sets none."""
        retry = retry or {}
        retries = retry.get("max_task_retries")
        if retries is None:
            retries = int(self.options.get("max_task_retries") or 0)
        return retries, retry.get("retry_exceptions") or False

    def submit(self, method, args, kwargs, num_returns, group=None, retry=None):
        """The ObjectRef(s) (or ObjectRefGenerator) of a call; never blocks on the actor.
        `group`: the concurrency group the call runs in (None: the method's own); `retry`: its
        retry options (_options.method_retry)."""
        if method not in self.methods:
            raise AttributeError(f"'{self.cls_name}' actor has no method '{method}' "
                                 f"(its methods: {sorted(self.methods)})")
        if group is not None:
            groups = self.options.get("concurrency_groups") or {}
            if group not in groups:
                raise ValueError(f"{self.cls_name}.{method}: concurrency group {group!r} is not "
                                 f"one of the actor's (its groups: {sorted(groups)})")
        streaming = num_returns == "streaming" or (num_returns is None
                                                   and self.methods[method][0])
        retries, retry_exceptions = self.retry_policy(retry)
        if group is not None:
            method = f"{method}{GROUP_SEPARATOR}{group}"
        if retries == 0 or streaming:
            fast = self._send_now(method, args, kwargs, num_returns, streaming)
            if fast is not None:
                return fast
        with self.lock:
            ready = (self.worker is not None and not self.queue and self.dead is None
                     and not any(not r._done() for r in top_level_refs(args, kwargs)))
            if streaming:
                cell = _cells.PendingStream()
                out = _objects.ObjectRefGenerator(cell, self.error_of)
            else:
                cell = _cells.Cell(_cells.decode_result, self.error_of)
                out = _refs(cell, num_returns)
                if retries != 0 and self.dead is None:
                    self.calls_submitted += 1
                    self.open_retried += 1
                    cell = RetriedCall(cell, self.calls_submitted, retries, retry_exceptions)
            if self.dead is not None:
                _fail(cell, self.dead)
            elif ready:
                self._send(method, args, kwargs, cell)
            else:
                self.queue.append((method, args, kwargs, cell))
                self.runtime.post(self.drain)
        return out

    def _send_now(self, method, args, kwargs, num_returns, streaming):
        """The ref of a call sent at once (a running actor, nothing queued, scalar arguments,
        one return value), or None when the general path must take it."""
        worker = self.worker
        if (worker is None or self.queue or streaming or num_returns not in (None, 1)
                or not all(map(is_plain, args)) or not all(map(is_plain, kwargs.values()))):
            return None
        with self.lock:
            if self.worker is not worker or self.queue:
                return None
            future = worker.call("call_async" if self.use_async_path else "call", method,
                                 list(args), kwargs, False)
            self._track(future)
        return _objects.ObjectRef(_cells.new_id(), _cells.Cell.of_future(
            future, _cells.decode_result, self.error_of))

    def _send(self, method, args, kwargs, cell):
        """Sends one call (under self.lock); `cell` is a Cell, a PendingStream for a streaming
        call, or a RetriedCall."""
        try:
            args, kwargs = resolve_refs(args, kwargs)
            # Scalars travel as troupe values; anything else is pickled here (out-of-band
            # buffers included) so that it arrives as the same type.
            pickled = not all(map(is_plain, args)) or not all(map(is_plain, kwargs.values()))
            if pickled:
                a, b = _serial.dumps((args, kwargs))
                a = _serial.inline(a, b)
            else:
                a, b = list(args), kwargs
        except Exception as e:  # noqa: BLE001 - a failed argument fails this call
            _fail(cell, e)
            return
        if isinstance(cell, RetriedCall):
            return self._send_attempt(method, args, kwargs, cell, a, b, pickled)
        if not isinstance(cell, _cells.Cell):
            self.escaped = True  # a stream's end is not tracked: never collected
            cell.bind(self.worker.stream("call_stream", method, a, b, pickled))
            return
        host_method = "call_async" if self.use_async_path else "call"
        future = self.worker.call(host_method, method, a, b, pickled)
        self._track(future)
        cell.bind(future)

    def _send_attempt(self, method, args, kwargs, call, a, b, pickled):
        """Sends one attempt of a RetriedCall; its end decides (on the dispatcher thread)."""
        worker = self.worker
        host_method = "call_async" if self.use_async_path else "call"
        future = worker.call(host_method, method, a, b, pickled)
        self._track(future)
        future.add_done_callback(lambda f: self.runtime.post(
            lambda: self._attempt_done(method, args, kwargs, call, worker, f)))

    def _attempt_done(self, method, args, kwargs, call, worker, attempt):
        with self.lock:
            retry = self.dead is None and call.wants_retry(attempt)
            if retry:
                if call.retries_left > 0:
                    call.retries_left -= 1
                try:
                    attempt.result(0)
                except _DEATHS:
                    call.dead_worker = worker  # sent again once the actor runs another
                else:
                    call.dead_worker = None
                # Before every call queued after it (they were submitted later), after the
                # retries submitted before it.
                at = 0
                while (at < len(self.queue) and isinstance(self.queue[at][3], RetriedCall)
                       and self.queue[at][3].seq < call.seq):
                    at += 1
                self.queue.insert(at, (method, args, kwargs, call))
            else:
                self.open_retried -= 1
                collect = self.collecting and not self.open_retried and not self.ending
        if not retry:
            call.cell.bind(attempt)
            if collect:
                self.runtime.post(self.collect)
            return
        if call.dead_worker is not None:
            # The actor's death and restart are the dispatcher's too: it sends the call once
            # started() installed a new worker.
            worker.died().add_done_callback(lambda _f: self.runtime.post(self.drain))
        self.runtime.post(self.drain)

    def _track(self, future):
        """Remembers a sent call's future (under self.lock) until it is done."""
        sent = self.sent
        sent.append(future)
        while sent and sent[0].done():
            sent.popleft()
        if len(sent) > 1024:
            self.sent = collections.deque(f for f in sent if not f.done())

    def collect(self):
        """The driver's last handle is gone (dispatcher thread): stops the actor, no restart,
        once its queued calls are sent and every sent call is done, as Ray ends an actor whose
        handles all went out of scope after its pending calls."""
        with self.lock:
            self.collecting = True
            if self.dead is not None or self.ending:
                return
            if self.queue or self.open_retried:
                return  # drain() and _attempt_done() call back once they are done
            self.ending = True  # once: a later drain() must not end it before these calls
            running = [f for f in self.sent if not f.done()]
            self.sent.clear()
        if not running:
            self.runtime.kill(self.actor_id, True)
            return
        left = [len(running)]
        lock = threading.Lock()

        def one_done(_future):
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                self.runtime.post(lambda: self.runtime.kill(self.actor_id, True))

        for f in running:
            f.add_done_callback(one_done)

    def drain(self):
        """Sends the queued calls that can go, in order (on the runtime's dispatcher thread)."""
        with self.lock:
            while self.queue:
                if self.dead is not None:
                    for _, _, _, cell in self.queue:
                        _fail(cell, self.dead)
                    self.queue.clear()
                    return
                if self.worker is None:
                    return
                method, args, kwargs, cell = self.queue[0]
                if isinstance(cell, RetriedCall) and cell.dead_worker is self.worker:
                    return  # its actor died: it goes to the restarted one (started() drains)
                waiting = [r for r in top_level_refs(args, kwargs) if not r._done()]
                if waiting:
                    waiting[0]._cell.add_done_callback(lambda: self.runtime.post(self.drain))
                    return
                self.queue.popleft()
                self._send(method, args, kwargs, cell)
            if not self.collecting:
                return
        self.runtime.post(self.collect)

    # -- life ----------------------------------------------------------------------------
    def started(self, worker):
        with self.lock:
            self.worker = worker
        self.runtime.post(self.drain)

    def mark_dead(self, error):
        with self.lock:
            self.dead = error
            self.worker = None
        self.runtime.post(self.drain)


def _fail(cell, error):
    """Completes a Cell, PendingStream or RetriedCall with `error`."""
    if isinstance(cell, RetriedCall):
        cell = cell.cell
    if isinstance(cell, _cells.PendingStream):
        cell.fail(error)
    else:
        cell.set_error(error)


def _refs(cell, num_returns):
    n = 1 if num_returns is None else num_returns
    if n == 1:
        return _objects.ObjectRef(_cells.new_id(), cell)
    ref_id = _cells.new_id()
    if n == 0:
        return None
    return [_objects.ObjectRef(ref_id, cell, i) for i in range(n)]
