"""The watchdog's rule for how long silence may last before a run is declared hung, and
what a rank's heartbeat says of how it ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commbench.launch import procs
from commbench.launch.heartbeat import Heartbeat
from commbench.launch.plane import ControlPlane
from commbench.launch.protocol import (
    STARTUP_TIMEOUT,
    FleetSummary,
    NodeSilence,
    RankState,
    heartbeat_path,
)
from commbench.launch.watchdog import Watch

BEAT = {"type": "heartbeat", "version": 1}
"""What every heartbeat file starts with (a `RankBeat`)."""


def _fleet(problems=(), silent=(), behind=(), furthest=(-1, 0)) -> FleetSummary:
    """A fleet summary as the aggregator publishes it, round-tripped through its encoding."""
    made = FleetSummary(
        seq=1, time=time.time(), interval=0.5, nnodes=3, reporting=3, progress=1,
        furthest=furthest, problems=tuple(problems), silent_nodes=tuple(silent),
        behind=tuple(behind),
    )  # fmt: skip
    return FleetSummary.from_json(made.to_json())


def _watching(run_dir: Path, fleet: FleetSummary) -> Watch:
    watch = Watch(run_dir, [])
    watch.control = ControlPlane(run_dir)  # its thread never started: the summary is given
    watch.control.fleet = fleet
    return watch


def _beat(run_dir: Path, rank: int, point: int, phase: str) -> None:
    path = heartbeat_path(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**BEAT, "rank": rank, "pid": 1, "point": point, "phase": phase}))


def test_start_up_gets_the_start_up_allowance_then_the_timeout_applies(tmp_path: Path) -> None:
    watch = Watch(tmp_path, [])
    watch.poll(lambda row: None)
    assert not watch.started
    assert watch.allowance(4) == STARTUP_TIMEOUT  # nobody reported in yet
    _beat(tmp_path, 0, -1, "init")
    _beat(tmp_path, 1, -1, "init")
    watch.poll(lambda row: None)
    assert watch.allowance(4) == STARTUP_TIMEOUT  # process group still coming up
    _beat(tmp_path, 1, 0, "warmup")
    watch.poll(lambda row: None)
    assert watch.started
    assert watch.allowance(4) == 4


def test_a_timeout_longer_than_start_up_is_kept(tmp_path: Path) -> None:
    watch = Watch(tmp_path, [])
    assert watch.allowance(STARTUP_TIMEOUT + 100) == STARTUP_TIMEOUT + 100


@pytest.mark.integration
def test_processes_are_found_by_their_run_marker(tmp_path: Path) -> None:
    """Workers that outlive torchrun (re-parented to init) are found by their environment."""
    env = {**os.environ, "COMMBENCH_RUN_DIR": str(tmp_path)}
    marked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = procs.marked("COMMBENCH_RUN_DIR", str(tmp_path))
        assert marked.pid in found and plain.pid not in found
        assert procs.marked("COMMBENCH_RUN_DIR", str(tmp_path / "other")) == set()
    finally:
        for p in (marked, plain):
            p.kill()
            p.wait()


def test_a_crash_from_a_lost_peer_names_the_silent_rank_on_the_other_node(tmp_path: Path) -> None:
    """The other node's watchdog may stop its stuck rank before ours fires: our ranks then
    only report a reset connection, and the rank that went silent is the cause to name."""

    from commbench.launch.watchdog import describe_crash

    path = heartbeat_path(tmp_path, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                **BEAT,
                "rank": 0,
                "local_rank": 0,
                "pid": 1,
                "point": 3,
                "phase": "timed",
                "host": "n0",
                "error": "RuntimeError: Connection reset by peer",
            }
        )
    )
    silent = RankState(
        rank=1, node=1, host="n1", pid=7, point=3, phase="timed", state="silent", quiet_s=6
    )
    watch = _watching(tmp_path, _fleet(problems=[silent]))
    watch.poll(lambda row: None)
    failure, culprits = describe_crash(watch, 1, timeout=5)
    assert culprits[0] == 1
    assert failure.startswith("worker failure: rank 1 (host n1) stopped responding")
    assert "rank 0 (host n0, exit 1) RuntimeError: Connection reset by peer" in failure
    # a remote rank its own launcher saw stopped is named as stopped, not as silent
    stopped = RankState(
        rank=1, node=1, host="n1", pid=7, point=3, phase="timed", state="stopped", quiet_s=6
    )
    watch.control.fleet = _fleet(problems=[stopped])
    watch.poll(lambda row: None)
    failure, culprits = describe_crash(watch, 1, timeout=5)
    assert culprits[0] == 1
    assert failure.startswith("worker failure: rank 1 (host n1) is stopped (SIGSTOP"), failure
    # with the remote rank running, our rank's error is all there is to say
    watch.control.fleet = _fleet()
    watch.poll(lambda row: None)
    failure, culprits = describe_crash(watch, 1, timeout=5)
    assert culprits == [0] and "rank 1" not in failure


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


@pytest.mark.integration
def test_a_rank_that_dies_after_its_launcher_names_the_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its peer noticed the dead launcher first and left; this rank only saw the reset."""
    monkeypatch.setattr(Heartbeat, "_run", lambda self: None)  # the thread would _exit us
    dead = _dead_pid()
    hb = Heartbeat(heartbeat_path(tmp_path, 1), rank=1, host="h", launcher_pid=dead)
    hb.stop(error="RuntimeError: Connection reset by peer")
    error = json.loads(heartbeat_path(tmp_path, 1).read_text())["error"]
    assert error.startswith(f"its launcher (pid {dead}) is gone")
    assert "Connection reset by peer" in error


def test_a_rank_that_fails_under_a_live_launcher_keeps_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Heartbeat, "_run", lambda self: None)
    hb = Heartbeat(heartbeat_path(tmp_path, 0), rank=0, host="h", launcher_pid=os.getpid())
    hb.stop(error="RuntimeError: Connection reset by peer")
    assert json.loads(heartbeat_path(tmp_path, 0).read_text())["error"] == (
        "RuntimeError: Connection reset by peer"
    )


@pytest.mark.integration
def test_a_stopped_process_is_killed_outright_and_a_running_one_terminated() -> None:
    """Resumed to act on SIGTERM, a SIGSTOPped rank would run on for a moment: finish its
    collective, publish a fresh heartbeat, and hide that it was the one that stopped."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    stopped, running = subprocess.Popen(sleeper), subprocess.Popen(sleeper)
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while procs.state(stopped.pid) not in ("T", "t") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert procs.state(stopped.pid) in ("T", "t")
        procs.stop_all({stopped.pid, running.pid}, grace=30)
        assert stopped.wait(10) == -signal.SIGKILL
        assert running.wait(10) == -signal.SIGTERM
    finally:
        for p in (stopped, running):
            p.kill()
            p.wait()


def test_the_first_stop_signal_interrupts_and_later_ones_are_held_not_lost() -> None:
    before = signal.getsignal(signal.SIGTERM)
    signals = procs.StopSignals()
    with signals.installed():
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler raises in here
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C while the record is written
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.05)  # delivered, and would have ended the test here
    assert signals.held == [signal.SIGINT, signal.SIGHUP]
    assert signal.getsignal(signal.SIGTERM) == before  # given back


def test_a_stop_signal_inside_deferred_is_raised_at_its_end() -> None:
    signals = procs.StopSignals()
    reached_end = False
    with signals.installed(), pytest.raises(KeyboardInterrupt), signals.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        reached_end = True  # the journal read is not cut in the middle
    assert reached_end and signals.held == []


def test_after_hold_every_stop_signal_is_only_recorded() -> None:
    signals = procs.StopSignals()
    with signals.installed():
        signals.hold()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
    assert signals.held == [signal.SIGTERM]


def test_torchrun_killed_before_any_worker_failed_is_named_as_the_agent(tmp_path: Path) -> None:
    from commbench.launch.watchdog import describe_crash

    watch = Watch(tmp_path, [])
    watch.poll(lambda row: None)
    assert describe_crash(watch, -signal.SIGKILL, timeout=5) == (
        "torchrun (the agent, not a worker) was killed by SIGKILL",
        [],
    )
    assert describe_crash(watch, -40, timeout=5)[0].endswith("was killed by signal 40")


_SUMMARY = """\
W1122 18:40:30.474000 5939 api.py:1028] Sending process 5943 closing signal SIGTERM
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
commbench.launch.worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_18:40:30
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 5943)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 5943
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_18:40:30
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 5944)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 5944
============================================================
"""


def test_a_sigterm_torchrun_did_not_send_is_the_cause(tmp_path: Path) -> None:
    """Both ranks died of SIGTERM; torchrun's log shows it sent only rank 0's."""
    from commbench.launch.watchdog import describe_crash

    (tmp_path / "launcher.log").write_text(_SUMMARY)
    watch = Watch(tmp_path, [])
    watch.poll(lambda row: None)
    failure, culprits = describe_crash(watch, 1, timeout=5)
    assert culprits == [1, 0]
    assert failure == (
        "worker failure: rank 1 (exit -15) killed by SIGTERM (not sent by torchrun); "
        "rank 0 (exit -15) killed by SIGTERM (a consequence: it lost its peer or was stopped "
        "by torchrun)"
    )
    # torchrun closing both (it was itself told to stop): neither is the cause
    (tmp_path / "launcher.log").write_text(
        _SUMMARY.replace(
            "5943 closing", "5944 closing signal SIGTERM\nW1122 Sending process 5943 closing"
        )
    )
    failure, _ = describe_crash(watch, 1, timeout=5)
    assert "not sent by torchrun" not in failure and failure.count("a consequence") == 2


def test_ignored_stop_signals_stay_ignored() -> None:
    """nohup ignores SIGHUP so that a closed terminal does not end the command: neither the
    launch's handler nor the command-wide one may undo that."""
    hup, term = signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        signals = procs.StopSignals()
        with signals.installed():
            try:
                os.kill(os.getpid(), signal.SIGHUP)
                time.sleep(0.05)
            except KeyboardInterrupt:  # not let through: pytest would end the whole session
                pytest.fail("an ignored SIGHUP interrupted the launch")
        assert signals.held == []
        procs.interrupt_on_termination()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    finally:
        signal.signal(signal.SIGHUP, hup)
        signal.signal(signal.SIGTERM, term)


@pytest.mark.integration
def test_workers_remove_the_temporary_files_of_a_vanished_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed in the middle of rewriting the results, a launcher cannot clean up after itself."""
    from commbench.results.store import temp_name

    monkeypatch.setattr(Heartbeat, "_run", lambda self: None)
    dead = _dead_pid()
    mine = [temp_name(tmp_path / n, dead) for n in ("run.json", "results.json", "results.csv")]
    other = temp_name(tmp_path / "results.json", os.getpid())
    for path in [*mine, other]:
        path.write_text("half")
    hb = Heartbeat(heartbeat_path(tmp_path, 0), rank=0, host="h", launcher_pid=dead)
    hb._remove_launcher_temps()
    assert not any(p.exists() for p in mine)
    assert other.exists()  # another writer's


def test_a_node_never_heard_from_is_named_by_its_ranks_and_host(tmp_path: Path) -> None:
    """A node whose launcher never published a digest (stopped before its workers' first
    heartbeat) must still be nameable when the run hangs: by the ranks and host the writer's
    roll gives it."""
    from commbench.launch.watchdog import NODE_SILENT, describe_hang

    hb = Heartbeat(heartbeat_path(tmp_path, 0), rank=0, host="n0")
    try:
        watch = _watching(tmp_path, _fleet(silent=[NodeSilence(node=2, quiet_s=30, never=True)]))
        watch.worker_context = {
            "ranks": [{"rank": r, "node": r, "host": f"n{r}"} for r in range(3)]
        }
        watch.poll(lambda row: None)
    finally:
        hb.stop()
    assert watch.heartbeats[2].remote and "never reported" in watch.heartbeats[2].phase
    message, culprits = describe_hang(watch, timeout=10)
    assert culprits == [2] and f"rank 2 (host n2, pid None) {NODE_SILENT}" in message, message


def test_a_remote_rank_stopped_is_named_as_its_node_saw_it(tmp_path: Path) -> None:
    from commbench.launch.watchdog import describe_hang

    stopped = RankState(rank=5, node=1, host="n1", pid=99, point=2, phase="timed", state="stopped")
    behind = RankState(rank=6, node=1, host="n1", pid=98, point=1, phase="timed")
    watch = _watching(tmp_path, _fleet(problems=[stopped], behind=[behind], furthest=(2, 4)))
    watch.poll(lambda row: None)
    message, culprits = describe_hang(watch, timeout=10)
    assert culprits == [5], message
    assert "rank 5 (host n1, pid 99) is stopped (SIGSTOP or a debugger)" in message
    assert "behind" not in message  # waiting on the stopped one, not a suspect
    watch.control.fleet = _fleet(behind=[behind], furthest=(2, 4))
    watch.poll(lambda row: None)
    message, culprits = describe_hang(watch, timeout=10)
    assert culprits == [6] and "rank 6 (host n1, pid 98) is behind the others" in message


@pytest.mark.integration
def test_a_hang_blames_the_silent_rank_not_those_that_died_or_waited_after_it(
    tmp_path: Path,
) -> None:
    """Node 0 hosts the job's store and its rank went silent: when its launcher gave up, the
    store went with it, so a survivor's torchrun stopped its rank (gone, but it beat after the
    stall), and another survivor's rank sat one iteration behind its peer, waiting. Only the
    silent rank is a culprit; the others are named as what they are."""
    from commbench.launch.watchdog import NODE_SILENT, describe_hang

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = time.time()
    beats = {
        1: {"rank": 1, "host": "n1", "pid": dead.pid, "point": 2, "phase": "timed",
            "iteration": 1, "time": now - 1},
        2: {"rank": 2, "host": "n1", "pid": os.getpid(), "point": 2, "phase": "exchange",
            "iteration": 0, "time": now},
    }  # fmt: skip
    for rank, beat in beats.items():
        (ranks / f"rank{rank}.json").write_text(json.dumps({**BEAT, **beat}))
    first = RankState(rank=0, host="n0", point=-1, phase="start-up")
    watch = _watching(
        tmp_path, _fleet(silent=[NodeSilence(node=0, host="n0", quiet_s=600, ranks=(first,))])
    )
    watch.poll(lambda row: None)
    message, culprits = describe_hang(watch, timeout=10)
    assert culprits == [0], message
    assert f"rank 0 (host n0, pid None) {NODE_SILENT}" in message
    assert f"rank 1 (host n1, pid {dead.pid}) is gone (a consequence:" in message
    assert "behind" not in message
    # the same rank gone with no one silent before it is the culprit, and a rank behind
    # the others is one when nobody stopped
    watch.control.fleet = _fleet()
    watch.poll(lambda row: None)
    message, culprits = describe_hang(watch, timeout=10)
    assert culprits == [1] and "consequence" not in message, message
    (ranks / "rank1.json").write_text(json.dumps({**BEAT, **beats[1], "pid": os.getpid()}))
    watch.poll(lambda row: None)
    message, culprits = describe_hang(watch, timeout=10)
    assert culprits == [2] and "rank 2 (host n1" in message and "is behind the others" in message


def test_the_launchers_failure_is_never_a_line_of_a_cpp_stack(tmp_path: Path) -> None:
    """Issue 43, item 6: torchrun that fails with no worker failed (its store lost at exit)
    ends its log in libtorch's C++ stack; the failure named its last line, `frame #27:
    _start + 0x21`. It names the last line that says something."""
    from commbench.launch.watchdog import describe_crash

    (tmp_path / "launcher.log").write_text(
        "torch.distributed.DistNetworkError: failed to recv, got 0 bytes\n"
        "[W1128 15:52:55.814732369 TCPStore.cpp:106] [c10d] sendBytes failed: Broken pipe\n"
        "Exception raised from sendBytes at torch/csrc/distributed/c10d/Utils.hpp:758:\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d\n"
        "<omitting python frames>\n"
        "frame #27: _start + 0x21 (0x55e609216081 in python)\n\n"
    )
    watch = Watch(tmp_path, [])
    watch.poll(lambda row: None)
    assert describe_crash(watch, 1, timeout=5) == (
        "the launcher failed: torch.distributed.DistNetworkError: failed to recv, got 0 bytes",
        [],
    )
    (tmp_path / "launcher.log").write_text("frame #0: c10::Error::Error()\n")
    assert describe_crash(watch, 1, timeout=5)[0] == "the launcher failed: torchrun exited with 1"
