"""Without a GPU, a user is told at once: `p2p` refuses before torch is imported and points at
what works without one (`--dry-run --topology`); `collectives` and `diagnose` say in their
first line that they run gloo on CPU ranks because no GPU is visible, and why."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.collectives import placement
from commbench.topology import TopologySnapshot
from commbench.topology.discover import GPU_DEVICE_NODES, no_gpu_reason
from tests.conftest import has_cuda
from tests.factories import fake_snapshot

ROOT = Path(__file__).resolve().parent.parent
NO_DRIVER = TopologySnapshot(source="nvml", nvml_error="NVML: library not found")


def machine(tmp_path: Path, *devices: str) -> Path:
    """A root with /dev holding `devices` (empty files stand for the device nodes)."""
    (tmp_path / "dev").mkdir()
    for name in devices:
        (tmp_path / "dev" / name).touch()
    return tmp_path


# --- when no GPU is certain, known without torch ---------------------------------------------


def test_gpus_listed_by_nvml_are_visible(tmp_path: Path) -> None:
    assert no_gpu_reason(fake_snapshot("dgx1v"), {}, machine(tmp_path)) is None


def test_nvml_listing_none_is_certain(tmp_path: Path) -> None:
    root = machine(tmp_path, "nvidia0", "nvidiactl")  # device files or not: NVML answered
    assert no_gpu_reason(fake_snapshot("zero_gpus"), {}, root) == "NVML reports no devices"
    hidden = fake_snapshot("dgx1v", {"CUDA_VISIBLE_DEVICES": "99"})
    assert no_gpu_reason(hidden, {}, root) == "CUDA_VISIBLE_DEVICES hides all 8 GPUs"


def test_no_driver_and_no_device_file_is_certain(tmp_path: Path) -> None:
    root = machine(tmp_path, "null", "nvme0", "dri")
    reason = no_gpu_reason(NO_DRIVER, {}, root)
    assert reason == f"NVML: library not found, and no GPU device in {root / 'dev'}"


@pytest.mark.parametrize("node", ["nvidia0", "nvidia7", "nvidiactl", "kfd", "dxg"])
def test_a_gpu_device_file_leaves_it_to_torch(tmp_path: Path, node: str) -> None:
    """No NVML but a device file: a ROCm torch (kfd), WSL (dxg) or a broken libnvidia-ml may
    still see a GPU, so nothing is refused before torch is asked."""
    assert no_gpu_reason(NO_DRIVER, {}, machine(tmp_path, node)) is None
    assert any(Path(node).match(pattern) for pattern in GPU_DEVICE_NODES)


@pytest.mark.parametrize(
    "spec", ["", " ", "-1", "-1,0", ",0", " -3 ,1", "\u2028", "\x85", "\u2029,0", "\t"]
)
def test_cuda_visible_devices_that_hides_every_gpu(tmp_path: Path, spec: str) -> None:
    """The driver's reading (`resolve_visible`): the list ends at the first entry that names
    no device, so an empty or negative first entry hides them all, whatever follows."""
    root = machine(tmp_path, "nvidia0")
    reason = no_gpu_reason(NO_DRIVER, {"CUDA_VISIBLE_DEVICES": spec}, root)
    assert reason == f"CUDA_VISIBLE_DEVICES={spec!r} hides every GPU"
    assert reason.isprintable()  # one line, whatever separator the variable held


@pytest.mark.parametrize("spec", ["0", "1,0", "GPU-5c3a", "MIG-GPU-5c3a/1/0", "10"])
def test_cuda_visible_devices_that_may_show_one(tmp_path: Path, spec: str) -> None:
    root = machine(tmp_path, "nvidia0")
    assert no_gpu_reason(NO_DRIVER, {"CUDA_VISIBLE_DEVICES": spec}, root) is None


# --- where the ranks go, and what is said ---------------------------------------------------


Install = Callable[[TopologySnapshot], None]


@pytest.fixture
def this_machine(monkeypatch: pytest.MonkeyPatch) -> Install:
    """Make `snapshot` what discovery finds on this machine."""

    def install(snapshot: TopologySnapshot) -> None:
        monkeypatch.setattr("commbench.topology.discover", lambda: snapshot)

    return install


def test_no_gpu_runs_gloo_on_cpu_ranks_and_says_why(this_machine: Install) -> None:
    this_machine(NO_DRIVER)
    place = placement.resolve_placement()
    assert (place.device, place.nproc, place.backend) == ("cpu", 2, "gloo")
    assert place.note == (
        "no GPU is visible (NVML: library not found), so this runs gloo on 2 CPU ranks"
    )
    assert placement.resolve_placement(nproc=3).note == (
        "no GPU is visible (NVML: library not found), so this runs gloo on 3 CPU ranks"
    )
    this_machine(fake_snapshot("zero_gpus"))
    assert placement.resolve_placement(backend="gloo").note == (
        "no GPU is visible (NVML reports no devices), so this runs gloo on 2 CPU ranks"
    )


def test_nothing_is_said_when_the_user_chose_or_a_gpu_is_there(this_machine: Install) -> None:
    this_machine(NO_DRIVER)
    assert placement.resolve_placement(device="cpu").note is None  # asked for
    assert placement.resolve_placement(backend="nccl").note is None  # refused later, not cpu
    this_machine(fake_snapshot("dgx1v"))
    place = placement.resolve_placement()
    assert (place.device, place.nproc, place.backend, place.note) == ("cuda", 8, "nccl", None)


@pytest.mark.parametrize("command", ["collectives", "diagnose"])
@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--nproc", "0"], "--nproc must be >= 1, got 0"),
        (["--sizes", "0"], "size '0' must be positive"),
        (["--iters", "0"], "--iters must be >= 1, got 0"),
        (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
        (["--timeout", "0"], "--timeout must be a positive number of seconds"),
    ],
)
def test_bad_input_without_a_gpu_is_still_one_line(
    this_machine: Install, command: str, args: list[str], error: str
) -> None:
    """The note waits until the run is under way: a refusal stays the only line."""
    this_machine(NO_DRIVER)
    result = CliRunner().invoke(app, [command, *args])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"commbench: error: {error}\n"


# --- the real commands ---------------------------------------------------------------------


def commbench(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


P2P_REFUSAL = re.compile(
    r"commbench: error: p2p needs a CUDA GPU, and none is visible \((?P<why>[^\n]+)\); "
    r"without one, `commbench p2p --dry-run --topology SNAPSHOT\.json` says what each copy "
    r"of another machine should reach \(SNAPSHOT\.json: `commbench topo --format json` there\)"
)


def refusal_without_torch(env: dict[str, str], cwd: Path) -> str:
    """`commbench p2p --src 0` in a real process: exit 2, one line, and torch never imported
    (`-X importtime` lists every module imported)."""
    done = commbench("-X", "importtime", "-m", "commbench", "p2p", "--src", "0", env=env, cwd=cwd)
    imports = [ln for ln in done.stderr.splitlines() if ln.startswith("import time:")]
    said = [ln for ln in done.stderr.splitlines() if not ln.startswith("import time:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == ""
    assert imports, "no -X importtime lines: the check below would prove nothing"
    torch = [ln for ln in imports if re.search(r"\|\s+torch(\.|$)", ln)]
    assert not torch, f"torch was imported before the refusal: {torch[:3]}"
    assert len(said) == 1
    match = P2P_REFUSAL.fullmatch(said[0])
    assert match, said[0]
    assert not (cwd / "results").exists()
    return match["why"]


@pytest.mark.parametrize(
    "args",
    [[], ["--src", "0"], ["--topology", str(ROOT / "tests/fixtures/p2p/snapshot_puzzle8.json")]],
    ids=["plain", "src", "topology-of-another-machine"],
)
def test_p2p_refuses_in_process_before_measuring(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """A --topology file with GPUs is another machine's: this one still has none."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setitem(sys.modules, "commbench.p2p.measure", None)  # importing it would fail
    result = CliRunner().invoke(app, ["p2p", *args])
    assert result.exit_code == 2, result.output
    match = P2P_REFUSAL.fullmatch(result.stderr.rstrip("\n"))
    assert match and match["why"] == "CUDA_VISIBLE_DEVICES='' hides every GPU", result.stderr


@pytest.mark.integration
def test_p2p_with_every_gpu_hidden_refuses_before_torch(tmp_path: Path) -> None:
    why = refusal_without_torch({"CUDA_VISIBLE_DEVICES": ""}, tmp_path)
    assert why == "CUDA_VISIBLE_DEVICES='' hides every GPU"


@pytest.mark.integration
@pytest.mark.skipif(has_cuda(), reason="this machine has a GPU")
def test_p2p_on_a_machine_without_a_gpu_refuses_before_torch(tmp_path: Path) -> None:
    # GPU 0 asked for: the refusal must come from the machine, not from the variable
    why = refusal_without_torch({"CUDA_VISIBLE_DEVICES": "0"}, tmp_path)
    assert why.startswith("NVML: ") or why == "NVML reports no devices", why


@pytest.mark.integration
@pytest.mark.parametrize(
    "command",
    [
        ["collectives", "--ops", "all_reduce", "--sizes", "1K", "--iters", "2", "--warmup", "1"],
        ["diagnose", "--sizes", "64K", "--iters", "2", "--warmup", "1"],
    ],
    ids=["collectives", "diagnose"],
)
def test_without_a_gpu_the_first_line_says_gloo_on_cpu_ranks(
    tmp_path: Path, command: list[str]
) -> None:
    done = commbench(
        "-m", "commbench", *command, "-o", "out", env={"CUDA_VISIBLE_DEVICES": ""}, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first = done.stderr.splitlines()[0]
    assert re.fullmatch(
        r"commbench: no GPU is visible \((NVML: [^)]+|CUDA_VISIBLE_DEVICES hides all \d+ GPUs)\), "
        r"so this runs gloo on 2 CPU ranks",
        first,
    ), first
    assert sum("no GPU is visible" in line for line in done.stderr.splitlines()) == 1
