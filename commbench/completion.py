"""When a call's communication completed, as the backend completed it: not when the process
next happened to look.

`Work.is_completed()` is not to be trusted for that. On gloo (torch 2.13) the Work of a
reduce_scatter never reports completion, even after `wait()`, and send/recv report it only
once the process has waited them; and a process that polls can only see a completion at its
next polling point, which in a training job may be 100 ms of compute later (issue 34: a
16 KiB all_reduce followed by 100 ms of compute was recorded at 103-168 ms).

So each Work is waited by a thread of ours, one thread per process group (a group's calls
complete in the order they were issued; two groups progress independently), which blocks in
`Work.wait()` with the GIL released (torch's binding releases it: the job's Python runs on
meanwhile) and stamps the clock the moment it returns. The stamp is late by the thread's
wake-up and, when the job runs pure Python at that moment, by the interpreter's switch
interval (5 ms) or more on a loaded machine: the capture therefore also stamps a call from
the job's own thread where the job learns it is done (its wait returns), and the first
stamp counts (record/capture.py).

A thread of ours is never inside a C++ wait when the interpreter finalizes (issue 43). A
thread that returns from `Work.wait()` after finalization has begun cannot take the GIL back:
Python 3.11 ends it through the C++ frames it returns through, and the process aborts with
"terminate called without an active exception" (a job that exits with a call in flight, the
call completing while the process tears its process group down). So a thread waits in
slices of `SLICE_S` (`Work.wait(timeout)`, which leaves the Work as it was when the slice
ends), looks at its stop flag between slices, and `close` stops and joins every thread: the
capture closes at exit (the last of the job's atexit functions), before finalization. One
Work does not keep to a slice: gloo's reduce_scatter (its wait ignores the timeout, and it
never reports completion); `close` then waits for it a bounded while more, and a thread
still inside it is named by `close`'s result.

What is never waited here, and why:
- point-to-point Works on CPU tensors (gloo's send, recv): they can be waited once only (a
  second waiter takes the buffer's notification and the job's own wait hangs, seen on torch
  2.13), and they report completion only once the job has waited them. A thread of ours
  polls them instead (`PolledCompletions`), often while they are young and less often as
  they age: a stamp is late by at most an eighth of the call's time or 5 ms;
- a Work on CUDA tensors: `wait()` there does not block the host, it makes the calling
  thread's current stream wait. Its completion is an event on a stream of ours that waits
  for it (`CudaCompletions`), read once the event has happened.

Nothing here runs on a backend's thread (a Python callback there must take the GIL and
stalls gloo's worker: docs/design/record-capture.md), and nothing here can block the job: the
threads are daemons, a Work that fails or never completes only stops its own group's stamps.
"""

from __future__ import annotations

import contextlib
import datetime
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

MAX_GROUPS = 64
"""Threads at most, one a process group; the groups past it share the last one (their stamps
can then wait behind each other's calls, never be lost)."""

Stamp = Callable[[T, "int | None"], None]
"""Called on the waiting thread with the token and the clock when its Work completed; None
when the Work failed (its exception is the job's, not ours)."""

SLICE_S = 0.05
"""A waiting thread looks at its stop flag this often (a slice that ends without the Work
done costs a C++ exception, some 20 us: 0.04% of a core)."""
JOIN_S = 1.0
"""How long `close` waits for each thread to see its stop flag: a slice, with room for a
starved core."""

Wait = Callable[[Any, float], bool]
"""Waits a Work at most so many seconds: True when it is done, False when the time passed
first; raises when the Work failed."""


def wait_slice(work: Any, seconds: float, wait: Callable[..., Any] | None = None) -> bool:
    """`Work.wait` (or `wait`, called with the Work) for at most `seconds`: `wait(timeout)`
    raises "Operation timed out!" when the time passes first, and leaves the Work as it
    was. A Work that completes between the timeout and our look is done, not failed: it is
    waited once more, which returns at once or raises the Work's own error."""
    call = wait or type(work).wait
    try:
        call(work, datetime.timedelta(seconds=seconds))
    except RuntimeError as exc:
        if "timed out" not in str(exc):
            raise
        if not work.is_completed():
            return False
        # it completed as the slice ended (CI saw this: the stamp was lost as a failure):
        # its own wait now returns at once, or raises its error if it failed
        call(work, datetime.timedelta(seconds=seconds))
    return True


class Completions(Generic[T]):
    """Waits each Work it is given on a thread of its group, and hands `stamp` the clock
    (`clock`, e.g. `time.time_ns` or `time.perf_counter_ns`) the moment it completed."""

    def __init__(
        self,
        stamp: Stamp[T],
        clock: Callable[[], int] = time.time_ns,
        wait: Wait = wait_slice,
    ) -> None:
        self._stamp = stamp
        self._clock = clock
        self._wait = wait
        self._lanes: dict[str, queue.SimpleQueue[tuple[Any, T] | None]] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._outstanding = 0
        self._idle = threading.Condition(self._lock)
        self._stop = threading.Event()

    def watch(self, group: str, work: Any, token: T) -> None:
        """Stamp `work`'s completion for `token`, after those of `group`'s calls before it."""
        lane = self._lane(group)
        with self._lock:
            self._outstanding += 1
        lane.put((work, token))

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every Work given so far is stamped (or failed); False on `timeout`."""
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout)

    def close(self, timeout: float = JOIN_S) -> int:
        """Stop every thread, within a slice, whatever it was waiting for (the Works not seen
        complete are dropped, never stamped), and join them, each for at most `timeout`
        seconds. Returns how many threads are still alive: inside a Work that does not keep
        to its slice (gloo's reduce_scatter) and has not completed."""
        self._stop.set()
        with self._lock:
            lanes = list(self._lanes.values())
            self._lanes.clear()
            threads = list(self._threads)
        for lane in lanes:
            lane.put(None)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
        return sum(thread.is_alive() for thread in threads)

    def _lane(self, group: str) -> queue.SimpleQueue[tuple[Any, T] | None]:
        lane = self._lanes.get(group)
        if lane is not None:
            return lane
        with self._lock:
            lane = self._lanes.get(group)
            if lane is None:
                if len(self._threads) >= MAX_GROUPS:
                    lane = next(reversed(self._lanes.values()))
                else:
                    lane = queue.SimpleQueue()
                    thread = threading.Thread(
                        target=self._run,
                        args=(lane,),
                        name=f"commbench-completion-{len(self._threads)}",
                        daemon=True,
                    )
                    self._threads.append(thread)
                    thread.start()
                self._lanes[group] = lane
            return lane

    def _run(self, lane: queue.SimpleQueue[tuple[Any, T] | None]) -> None:
        while not self._stop.is_set() and (item := lane.get()) is not None:
            work, token = item
            done = False
            stamp: int | None = None
            try:
                while not (done := self._wait(work, SLICE_S)) and not self._stop.is_set():
                    pass
                if done:
                    stamp = self._clock()
            except Exception:  # the Work failed: the job sees its error
                done = True
            del work, item  # the Work and its tensors are not kept by a waiting thread
            if done:
                with contextlib.suppress(Exception):
                    self._stamp(token, stamp)
            with self._idle:
                self._outstanding -= 1
                if self._outstanding == 0:
                    self._idle.notify_all()


MAX_POLLED = 4096
"""Works polled at most; past it the oldest is forgotten (a Work the job never waits never
completes, and must not keep its tensors for ever)."""
POLL_MIN_S = 200e-6
POLL_MAX_S = 5e-3
POLL_FRACTION = 8
"""Polled Works are looked at again after an eighth of the youngest one's age, between 0.2
and 5 ms."""


class PolledCompletions(Generic[T]):
    """Polls each Work it is given (`Work.is_completed`) from one thread of ours, and hands
    `stamp` the clock when it is first seen complete: for Works that must not be waited by
    anyone but their caller (gloo's send and recv). The thread sleeps while it has nothing
    to poll."""

    def __init__(self, stamp: Stamp[T], clock: Callable[[], int] = time.time_ns) -> None:
        self._stamp = stamp
        self._clock = clock
        self._works: list[tuple[Any, T, float]] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, work: Any, token: T) -> None:
        with self._wake:
            self._works.append((work, token, time.monotonic()))
            del self._works[:-MAX_POLLED]  # never waited by the job: forgotten, not kept
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="commbench-completion-polled", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def poll(self) -> None:
        """Look at every Work now (the caller's own polling point)."""
        with self._wake:
            works, self._works = self._works, []
        self._works_back(self._look(works))

    def drain(self, timeout: float | None = None) -> bool:
        """Poll until every Work given is seen complete; False on `timeout` (the rest are
        kept)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.poll()
            with self._wake:
                if not self._works:
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(POLL_MIN_S)

    def close(self, timeout: float = JOIN_S) -> int:
        """Stop the thread and join it (for at most `timeout`); the Works not seen complete
        are dropped. Returns 1 if it is still alive, else 0."""
        with self._wake:
            self._closed = True
            self._wake.notify()
            thread = self._thread
            self._works = []
        if thread is None or thread is threading.current_thread():
            return 0
        thread.join(timeout)
        return int(thread.is_alive())

    def _look(self, works: list[tuple[Any, T, float]]) -> list[tuple[Any, T, float]]:
        left = []
        for item in works:
            work, token, _ = item
            try:
                done = work.is_completed()
            except Exception:  # a failed Work: its error is the job's
                with contextlib.suppress(Exception):
                    self._stamp(token, None)
                continue
            if done:
                with contextlib.suppress(Exception):
                    self._stamp(token, self._clock())
            else:
                left.append(item)
        return left

    def _works_back(self, left: list[tuple[Any, T, float]]) -> None:
        if left:
            with self._wake:
                self._works[:0] = left

    def _run(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._works or self._closed)
                if self._closed:
                    return
                works, self._works = self._works, []
            left = self._look(works)
            self._works_back(left)
            youngest = max((since for _, _, since in left), default=None)
            # no Work is held by this thread while it waits: one that outlived its process
            # group (destroyed at the job's end) would be freed after it, and abort
            del works, left
            if youngest is not None:
                age = time.monotonic() - youngest
                time.sleep(min(POLL_MAX_S, max(POLL_MIN_S, age / POLL_FRACTION)))


class CudaCompletions(Generic[T]):
    """The completion of Works on CUDA tensors (NCCL's, gloo's on CUDA): a timing event
    recorded on the job's current stream before the call (`start`), and, on a thread of
    ours, the Work waited on a side stream of ours (the side stream waits for the call's end:
    nothing of the job's waits on anything) with a second event recorded there. Once that
    event has happened, the call took `start.elapsed_time(end)` of device time from the
    moment its stream reached it, and `stamp` gets `issued + that`. Under CUDA graph capture
    no event is recorded (the caller skips calls being captured)."""

    def __init__(self, stamp: Stamp[T]) -> None:
        self._stamp = stamp
        self._completions: Completions[tuple[T, Any, Any, int]] = Completions(
            self._done, clock=lambda: 0, wait=lambda side, seconds: side.wait_for(seconds)
        )

    def start(self) -> Any:
        """The event before a call, on the current stream: given to `watch` with its Work."""
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def watch(self, group: str, work: Any, token: T, start: Any, issued: int, device: Any) -> None:
        side = _OnSide(work, device)
        self._completions.watch(group, side, (token, start, side, issued))

    def drain(self, timeout: float | None = None) -> bool:
        return self._completions.drain(timeout)

    def close(self, timeout: float = JOIN_S) -> int:
        return self._completions.close(timeout)

    def _done(self, item: tuple[T, Any, Any, int], stamp: int | None) -> None:
        token, start, side, issued = item
        if stamp is None or side.end is None:
            self._stamp(token, None)
            return
        self._stamp(token, issued + int(start.elapsed_time(side.end) * 1e6))


_SIDE_STREAMS: dict[Any, Any] = {}
"""The side stream of each device that a call's end is waited on (one: its waits order
nothing of the job's)."""


class _OnSide:
    """A Work whose `wait_for` makes a side stream of ours wait for it, records an end event
    there and then looks, for at most so many seconds, whether the event has happened
    (`end`, read by `CudaCompletions._done`). Looked at, not synchronized: a thread of ours
    is never inside a C++ wait it cannot leave (the time is the events', not the host's)."""

    def __init__(self, work: Any, device: Any) -> None:
        self.work = work
        self.device = device
        self.end: Any = None
        self._recorded: Any = None
        self._since = 0.0

    def wait_for(self, seconds: float) -> bool:
        import torch

        if self._recorded is None:
            stream = _SIDE_STREAMS.get(self.device)
            if stream is None:
                stream = _SIDE_STREAMS[self.device] = torch.cuda.Stream(device=self.device)
            with torch.cuda.stream(stream):
                self.work.wait()
                end = torch.cuda.Event(enable_timing=True)
                end.record(stream)
            self._recorded, self._since = end, time.monotonic()
        deadline = time.monotonic() + seconds
        while not self._recorded.query():
            now = time.monotonic()
            if now >= deadline:
                return False
            # as often as polled Works: the stamp is the events', only its writing waits
            time.sleep(min(POLL_MAX_S, max(POLL_MIN_S, (now - self._since) / POLL_FRACTION)))
        self.end = self._recorded
        return True
