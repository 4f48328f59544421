"""The cross-node watch's one way to the job's c10d store: every request timed, bounded by
a deadline it cannot outlive (`StoreLink`, on a courier thread of its own) and counted, so a
store that is slow or gone degrades the watch and never holds the run. The keys commbench
writes there (`Keys`), and a read that never blocks on a missing key (`peek`)."""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from commbench.launch.protocol import (
    PREFIX,
)

SLOW_CALL = 1.0
"""Seconds after which a store request counts as failed: the watch degrades, the run goes on."""
RECONNECT_AFTER = 5.0
PLACEHOLDER = b"-"
"""What a key holds before its writer's first value (created by `peek`, never decoded)."""


class Keys:
    """The store keys of one job (the store is the job's: torchrun's own keys live beside)."""

    def __init__(self, job: str = "job") -> None:
        self.base = f"{PREFIX}{job}/"

    def digest(self, node: int) -> str:
        return f"{self.base}digest/{node}"

    @property
    def fleet(self) -> str:
        return f"{self.base}fleet"

    def group(self, group: int) -> str:
        return f"{self.base}group/{group}"

    def rollcall(self, what: str) -> str:
        return f"{self.base}rollcall/{what}"


@dataclass(slots=True)
class Episode:
    since: float
    reason: str
    until: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"since": self.since, "until": self.until, "reason": self.reason}


class StoreDown(Exception):
    """A store request failed or was too slow; the caller degrades, never the run."""


class _Overdue(Exception):
    """A request got no answer by its deadline (`_Courier.run`)."""


class _Courier:
    """Makes one link's store requests on a daemon thread of its own, so that its caller
    waits at most a deadline. c10d's TCPStore client honours its timeout only where it waits
    for a key: against a stopped store (SIGSTOP, a frozen host) a `compare_set` or a fresh
    connect blocked for as long as the store was stopped (50 s and 25 s measured, and over
    290 s here), with the caller's thread inside it. Overdue, the courier is abandoned with
    its connection, and its thread ends whenever the store answers or the process exits."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="commbench-store", daemon=True).start()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    def run(self, fn: Callable[[], Any], deadline: float) -> Any:
        done = threading.Event()
        box: list[tuple[bool, Any]] = []

        def job() -> None:
            try:
                box.append((True, fn()))
            except BaseException as exc:  # handed to the caller
                box.append((False, exc))
            finally:
                done.set()

        self._jobs.put(job)
        if not done.wait(deadline):
            raise _Overdue
        ok, value = box[0]
        if ok:
            return value
        raise value

    def close(self) -> None:
        self._jobs.put(None)


class StoreLink:
    """Timed store requests, counted. Connects lazily (`factory`) and after a failure waits
    RECONNECT_AFTER seconds before the next try, so a store that is gone costs nothing.
    Counts requests and bytes per operation: the benchmark's and the tests' measure, and the
    run's own record of what the watch cost.

    With `slow_after` set, no request (the connect included) holds its caller longer than
    that: it runs on the link's courier thread, and one that is overdue fails the link
    (`StoreDown`) and is abandoned with its connection."""

    def __init__(
        self,
        factory: Callable[[], Any],
        clock: Callable[[], float] = time.time,
        slow_after: float | None = SLOW_CALL,
    ) -> None:
        self._factory = factory
        self.slow_after = slow_after
        """None where a request may block by design (a `wait`)."""
        self._store: Any = None
        self._courier: _Courier | None = None
        self._clock = clock
        self._retry_at = 0.0
        self.requests: dict[str, int] = {}
        self.bytes = 0
        self.seconds = 0.0
        """Time spent in requests that returned: the store's time this link cost, as its
        client saw it (round trips included)."""
        self.busy_since: float | None = None
        """When the request in flight began (the owner's thread reads it: a request that hangs
        past SLOW_CALL degrades the watch even before it returns)."""
        self.episodes: list[Episode] = []

    @property
    def degraded(self) -> Episode | None:
        return self.episodes[-1] if self.episodes and self.episodes[-1].until is None else None

    def _down(self, reason: str) -> None:
        if self.degraded is None:
            self.episodes.append(Episode(since=self._clock(), reason=reason[:200]))
            del self.episodes[:-20]
        self._store = None
        if self._courier is not None:  # its thread may be inside the failed request
            self._courier.close()
            self._courier = None
        self._retry_at = time.monotonic() + RECONNECT_AFTER

    def _bounded(self, fn: Callable[[], Any], within: float | None) -> Any:
        """`fn()`, on the courier within `within` seconds, or here where no deadline is set."""
        if within is None:
            return fn()
        if self._courier is None:
            self._courier = _Courier()
        return self._courier.run(fn, within)

    def _up(self) -> None:
        if (episode := self.degraded) is not None:
            episode.until = self._clock()

    def call(self, op: str, *args: Any) -> Any:
        return self._call(op, args, self.slow_after)

    def wait(self, key: str, seconds: float) -> bool:
        """Whether `key` is set within `seconds`, asked in one request that the store answers
        when the key is set (at once where it is): c10d honours a wait's own timeout, where
        it does not a plain request's (`_Courier`), and the connection serves on after it. A
        wait that ends with the key unset is no failure of the store; a store that does not
        answer within `seconds` and `slow_after` more is (StoreDown)."""
        seconds = max(seconds, 0.001)  # a caller past its deadline still gets one look
        within = None if self.slow_after is None else seconds + self.slow_after
        args = ([key], timedelta(seconds=seconds))
        return self._call("wait", args, within, waiting=True) is not _UNSET

    def _call(
        self, op: str, args: tuple[Any, ...], within: float | None, waiting: bool = False
    ) -> Any:
        """`op(*args)` within `within` seconds; `waiting`, c10d's answer that a wait ended
        with its key unset returns _UNSET and leaves the link up."""
        if self._store is None:
            if time.monotonic() < self._retry_at:
                raise StoreDown("waiting to reconnect")
            try:
                self._store = self._bounded(self._factory, self.slow_after)
            except _Overdue:
                self._down(f"cannot connect: no answer in {self.slow_after:g} s")
                raise StoreDown("connect: no answer") from None
            except Exception as exc:
                self._down(f"cannot connect: {_one_line(exc)}")
                raise StoreDown(str(exc)) from None
        started = time.monotonic()
        self.busy_since = self._clock()
        store = self._store
        try:
            result = self._bounded(lambda: getattr(store, op)(*args), within)
        except _Overdue:
            self._down(f"{op} got no answer in {within:g} s")
            raise StoreDown(f"{op}: no answer in {within:g} s") from None
        except Exception as exc:
            if not (waiting and _wait_ended_unset(exc)):
                self._down(f"{op} failed: {_one_line(exc)}")
                raise StoreDown(str(exc)) from None
            result = _UNSET
        finally:
            self.busy_since = None
        took = time.monotonic() - started
        self.seconds += took
        self.requests[op] = self.requests.get(op, 0) + 1
        self.bytes += _size(args) + _size([result])
        if within is not None and took > within:
            self._down(f"{op} took {took:.1f} s")
            raise StoreDown(f"{op} took {took:.1f} s")
        self._up()
        return result

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def close(self) -> None:
        """Drop the connection and end the courier thread (a request in flight ends it when
        it returns)."""
        self._store = None
        if self._courier is not None:
            self._courier.close()
            self._courier = None


_UNSET = object()
"""What `StoreLink._call` returns for a wait that ended with its key unset."""


def _wait_ended_unset(exc: Exception) -> bool:
    """Whether c10d said a wait ended before its key was set: its store error (a broken
    connection is a network error, a refused one a plain runtime error)."""
    error = getattr(sys.modules.get("torch.distributed"), "DistStoreError", None)
    return error is not None and isinstance(exc, error) and "timeout" in str(exc).lower()


def _size(values: Iterable[Any]) -> int:
    n = 0
    for v in values:
        if isinstance(v, bytes | str):
            n += len(v)
        elif isinstance(v, list | tuple):
            n += _size(v)
    return n


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:160]


CPP_LOG_LEVEL = "TORCH_CPP_LOG_LEVEL"


def store_class() -> Any:
    """torch's TCPStore: the one import of it in a launcher (the cross-node watch, diagnose's
    muster). c10d logs every failed request with a C++ stack on the launcher's stderr (a
    client that cannot connect, a store gone with the node that held it, which ended first),
    where commbench says a degraded watch once, in run.json and a warning; so torch's first
    import here holds its C++ log to FATAL, whatever TORCH_CPP_LOG_LEVEL says (the level is
    read then), and puts the user's own back at once for the workers it is meant for. A
    process that imported torch before (a Python program using the API) keeps its level."""
    if "torch" not in sys.modules:
        users = os.environ.get(CPP_LOG_LEVEL)
        os.environ[CPP_LOG_LEVEL] = "FATAL"
        try:
            import torch.distributed  # noqa: F401 (the import that reads the level)
        finally:
            if users is None:
                os.environ.pop(CPP_LOG_LEVEL, None)
            else:
                os.environ[CPP_LOG_LEVEL] = users
    from torch.distributed import TCPStore

    return TCPStore


def tcp_store_factory(host: str, port: int) -> Callable[[], Any]:
    """A client of the job's store with SLOW_CALL as its timeout (torch imported here, in the
    caller's thread, never on a courier's, and only on multi-node runs)."""
    tcp_store = store_class()

    def connect() -> Any:
        return tcp_store(
            host,
            port,
            is_master=False,
            timeout=timedelta(seconds=SLOW_CALL),
            wait_for_workers=False,
        )

    return connect


def peek(link: StoreLink, key: str) -> bytes | None:
    """A key's value without blocking on a missing one, in one request: compare_set with an
    empty expected value creates PLACEHOLDER where nothing is, and returns what is there."""
    value = bytes(link.call("compare_set", key, "", PLACEHOLDER))
    return None if value == PLACEHOLDER else value
