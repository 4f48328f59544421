"""Shared fixtures. Every test writes under tmp_path, never into the checkout's results/.

Two lanes: `make test-fast` runs the tests that start no process (unit tests, and commands
run in-process through typer's CliRunner) in about a minute; `make test` runs them all. A
test that starts a process (torchrun workers, `python -m commbench`, a tool) carries a mark
that keeps it out of the fast lane: `integration`, `netns` (network namespaces, root),
`slurm` (SLURM daemons) or `gpu`. The guard below enforces it: in a test with none of these
marks, starting a process fails the test, naming the mark to add, so a new slow test cannot
slip into the fast lane unnoticed. It holds over the test's fixtures too (a module- or
session-scoped one is set up inside the first test that asks for it), and over collection in
either lane: a test module that starts a process as it is imported (a `skipif` that probes the
machine) fails to collect, so a condition that needs a process is asked at setup instead, as
the `netns` mark's is below.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import os
import random
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import typer
import typer.testing
from process_guard import refusing_processes  # tests/ is on sys.path, as for netns_cluster

LAUNCH_MARKS = ("integration", "netns", "slurm", "gpu")
"""The marks of tests that may start processes: all of them stay out of `make test-fast`."""


MARK_IT = (
    "mark it @pytest.mark.integration (or netns, slurm, gpu) so that it runs in `make test` "
    "and stays out of `make test-fast`"
)
ASK_AT_SETUP = (
    "ask at setup (a fixture, or pytest_runtest_setup as for netns below), not while the "
    "module is imported or its marks evaluated"
)


def _unmarked(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(mark) for mark in LAUNCH_MARKS)


def pytest_sessionstart(session: pytest.Session) -> None:
    """matplotlib builds its font cache the first time it is imported on a machine, and runs
    `fc-list` to do it: on a fresh machine (or a fresh MPLCONFIGDIR) the first plotting test
    then started a process and failed the guard below, 31 fast tests at once. The cache is
    built here, before any guard, once per machine (a second of CPU the first time, then an
    import of a module the suite imports anyway)."""
    import matplotlib.font_manager  # noqa: F401  (its import builds the cache)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Starting a process from a test without a launch mark fails it (see the docstring):
    over the test's whole setup, call and teardown, so that a module- or session-scoped
    fixture that starts torchrun for unmarked tests fails the first of them too (such a
    fixture is set up before any function-scoped one could guard it)."""
    if not _unmarked(item):
        return (yield)
    with refusing_processes(item.nodeid, MARK_IT):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    """Collecting starts nothing, in either lane: every test module is imported, and its
    marks evaluated, for `make test-fast` too, whatever marks then deselect its tests."""
    with refusing_processes(f"{collector.nodeid or 'the session'}, collected,", ASK_AT_SETUP):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> object:
    """Collection imports every test module, torch and matplotlib among what they import:
    hundreds of thousands of objects that live as long as the session. The cyclic garbage
    collector walked all of them at each of its full collections, a score of them while
    collecting and dozens over the tests (12 s of the fast lane's 57 s of CPU). So it is off
    while collecting, and what collection made is moved out of its sight (`gc.freeze`).
    Over the tests it collects every 5,000 new objects rather than 700: the tests make
    millions, nearly all freed by their counts, and the young collections and the full ones
    they lead to cost 3 s more than at 5,000 (tests/package_source.py freezes the source's
    syntax trees likewise)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        gc.set_threshold(5_000, *gc.get_threshold()[1:])
        if enabled:
            gc.enable()


@functools.cache
def _netns_unavailable() -> str | None:
    from netns_cluster import netns_available  # tests/ is on sys.path, as for the modules

    return netns_available()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A `netns` test is skipped, saying why, where this machine cannot make a network
    namespace: asked when the first of them is set up (the probe runs `ip`), never while
    collecting, so the fast lane, which deselects them, never asks."""
    if item.get_closest_marker("netns") is not None and (reason := _netns_unavailable()):
        pytest.skip(reason)


def _built_once(get_command: Callable[[typer.Typer], object]) -> Callable[[typer.Typer], object]:
    """typer's CliRunner builds the click command from the Typer app at every `invoke`
    (walking every command and option: a tenth of the fast lane's time, over its thousands of
    invocations), where `commbench` builds it once per process. Built once per app here too;
    the app is kept, so that its id is never another's. So are the command and the group
    that commbench's job commands (`commbench.cli._job`, once per job asked for: hundreds
    here) and the tests that read every command's options build with typer's own
    functions."""
    built: dict[int, tuple[typer.Typer, object]] = {}

    def get(app: typer.Typer) -> object:
        if id(app) not in built:
            built[id(app)] = (app, get_command(app))
        return built[id(app)][1]

    return get


if callable(getattr(typer.testing, "_get_command", None)):  # typer's own name: kept if it goes
    typer.testing._get_command = _built_once(typer.testing._get_command)  # type: ignore[attr-defined]
typer.main.get_command = _built_once(typer.main.get_command)  # type: ignore[assignment]
typer.main.get_group = _built_once(typer.main.get_group)  # type: ignore[assignment]


@pytest.fixture(autouse=True, scope="session")
def _figures_drawn_once() -> Iterator[None]:
    """A report's figures are drawn by `png_bytes` (a quarter of a second each), and the
    suite reports the same few fixture runs dozens of times (the report's sections, its
    `--out` checks, every reader of a stored file): a figure equal to one drawn before in
    the session is the same PNG, so it is drawn once. The key is the figure's repr, which
    holds every field `draw` reads; a figure that fails to draw is not kept, so it fails
    each time. The tests of drawing itself (`draw`, `write_figures`, the heatmaps) are
    untouched: they call matplotlib every time."""
    from commbench.report import plots

    draw_png = plots.png_bytes
    drawn: dict[str, bytes] = {}

    def png_bytes(figure: object) -> bytes:
        key = repr(figure)
        if key not in drawn:
            drawn[key] = draw_png(figure)  # type: ignore[arg-type]
        return drawn[key]

    plots.png_bytes = png_bytes  # type: ignore[assignment]
    yield
    plots.png_bytes = draw_png


@pytest.fixture(autouse=True, scope="session")
def _fsync_checks_its_file() -> Iterator[None]:
    """The suite writes runs by the hundred, each file through `atomic_write`'s fsync (2 to 3
    ms on a disk: two seconds of the fast lane), and nothing a test can see depends on it: a
    file's bytes reach every reader, in this process or another, without it; only a power
    cut would tell. So `os.fsync` only checks its file descriptor here (a closed or bad one
    raises as fsync's would), in this process; processes a test starts sync for real.
    `test_a_durable_write_syncs_its_file` checks that atomic_write calls it."""
    real = os.fsync

    def fsync(fd: object) -> None:
        os.fstat(fd)  # type: ignore[arg-type]

    os.fsync = fsync
    yield
    os.fsync = real


@pytest.fixture(scope="session")
def _test_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Iterator[int]]:
    return tmp_path_factory.mktemp("t", numbered=False), itertools.count()


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, _test_dirs: tuple[Path, Iterator[int]]) -> Path:
    """pytest's `tmp_path`, a new directory per test under the session's base directory,
    made in one mkdir: pytest's own numbers each directory by listing all those made before
    it in that one base directory, which over the suite's 5,000 tests (each has one, for
    `_isolated_cwd`) grows quadratically, to seconds. No longer than pytest's own paths
    (`t/`, 25 characters of the name and up to 4 digits, where pytest had 30 and 1): a SLURM
    cluster under it puts its daemons' unix sockets there, whose paths have 108 bytes."""
    root, counter = _test_dirs
    path = root / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', request.node.name)[:25]}{next(counter)}"
    path.mkdir()
    return path


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run each test in its own directory so the default `results/` lands in tmp_path."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True, scope="session")
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One probe cache for the whole session, never the user's ~/.cache."""
    os.environ["COMMBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture
def no_gpu_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def quiet_ports() -> range:
    """Ports the kernel never picks by itself: those below its ephemeral range (10000..32767
    by default), where `held_port` draws from when no range is given.

    The kernel's own choices cannot find two free ports in a row on a busy machine. bind() to
    port 0 gives an odd port, and connect() takes even ones first, walking up from a point
    that is the same for every connection to one address: a machine whose tests open and
    close thousands of store and gloo connections has most even ports of the ephemeral range
    in TIME_WAIT for a minute (15,000 short connections: 94% of the kernel's odd choices had
    the next port taken), and the port after the kernel's choice was taken 64 times in a row.
    Below that range nobody is handed a port they did not ask for."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    return range(10_000, low) if low - 10_000 >= 1_000 else range(1024, 65536)


def _bound(port: int, span: int) -> list[socket.socket] | None:
    """Sockets bound to port..port+span-1, none listening; None if any of them is taken."""
    socks: list[socket.socket] = []
    try:
        for k in range(span):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind(("", port + k))
    except OSError:
        for sock in socks:
            sock.close()
        return None
    return socks


@contextlib.contextmanager
def held_port(lo: int = 0, hi: int = 0, span: int = 1) -> Iterator[int]:
    """A TCP port that no other process can take until the block ends, yet a server started
    inside the block (a torchrun rendezvous) can bind and listen on.

    Choosing a free port and letting it go before the server binds it leaves a window for
    anything else to take it: an outgoing connection's ephemeral port, another test's choice,
    another user's daemon. So the port stays bound, by a socket that never listens. It binds
    first without SO_REUSEADDR, which fails on a port anybody holds in any way (a connection
    in TIME_WAIT included), and only then sets SO_REUSEADDR: a server that sets it too
    (torch's TCPStore does, with or without libuv) may bind beside a socket that is not
    listening, while every other bind, the kernel's own choices for port 0 and for connect()
    included, keeps off the port.
    The port is drawn from lo..hi-1, or without `hi` from `quiet_ports()`, trying every
    start in a random order until one is free. `span`: the ports after it are held too
    (diagnose's muster listens on the rendezvous port + 1), all of them in the range.
    """
    ports = range(lo, hi) if hi else quiet_ports()
    starts = range(ports.start, ports.stop - span + 1)
    for port in random.sample(starts, len(starts)):
        socks = _bound(port, span)
        if socks is None:
            continue
        for sock in socks:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            yield port
        finally:
            for sock in socks:
                sock.close()
        return
    run = f" with the {span - 1} after it" if span > 1 else ""
    raise RuntimeError(
        f"no free TCP port{run} in {ports.start}..{ports.stop - 1}: "
        f"tried all {len(starts)}, each taken by another socket"
    )


@pytest.fixture(scope="session")
def hold_port() -> Callable[..., AbstractContextManager[int]]:
    """`held_port` for fixtures of any scope: `with hold_port(lo, hi) as port: ...`."""
    return held_port


@pytest.fixture
def free_port() -> Iterator[int]:
    """A port for one test's rendezvous, held (see `held_port`) with the one after it (the
    muster's) until the test ends."""
    with held_port(span=2) as port:
        yield port


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A `gpu` test is skipped without CUDA. Asked last, after `-m` has deselected what it
    deselects, and only where a `gpu` test is left: asking imports torch (seconds), which the
    fast lane, where none is left, never needs."""
    # the marker itself, not `"gpu" in item.keywords`: keywords also hold the names of the
    # enclosing directories, so a checkout in a directory named gpu skipped every test
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu or has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in gpu:
        item.add_marker(skip)


os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def stoppable_store() -> Iterator[tuple[int, int]]:
    """A real TCPStore in a process of its own (its port and pid), to SIGSTOP like a frozen
    host; SIGCONTed and ended at teardown, whatever the test did to it. Only for tests that
    may start processes (marked integration)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-c", (
            "import time, torch.distributed as d; from datetime import timedelta\n"
            f"s = d.TCPStore('127.0.0.1', {port}, is_master=True, "
            "timeout=timedelta(seconds=30), wait_for_workers=False)\n"
            "print('up', flush=True); time.sleep(120)"
        )],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        yield port, server.pid
    finally:
        os.kill(server.pid, signal.SIGCONT)
        server.kill()
        server.wait()
        server.stdout.close()  # type: ignore[union-attr]
