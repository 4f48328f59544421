"""The GPU evidence in one command (`make gpu-check`), from a plain checkout.

It installs nothing: torch (a CUDA build the driver can run: docs/development.md, "Which torch
for which driver") and commbench's dependencies must already import; where one does not, it names what
is missing in one line and exits 2. commbench itself comes from this checkout, installed or
not (the steps and their torchrun workers get it on PYTHONPATH).

On a machine with a CUDA GPU, each step bounded by its timeout and all of them by `--budget`
(480 s by default: the timeouts, a kill's grace per step and the final packing add up to it
at worst), every step's output kept in its own log:

1. the GPU-marked tests (`pytest -m gpu`): the timers on the device (the hold keeps a small
   op's batch queued), NCCL record and replay of a DDP job with a call captured in a CUDA
   graph, symmetric-memory calls counted, a coalesced group replayed as one, the docs' GPU
   block;
2. `benchmarks/p2p_single_gpu.py`: device-to-device copies against a bare torch copy loop,
   pinned host<->device copies against the PCIe rate;
3. `benchmarks/harness_overhead.py --backend nccl --nproc 1`, eager and `--graph`, 1 KiB to
   1 GiB: commbench's timers against a bare loop's device time, around an op that moves data
   on one rank, and the rate the host issues the op at beside it;
4. `commbench p2p --host --latency`, whose run directory is a reference run;
5. with two GPUs or more, on all of them: the harness around a real all_reduce, a short
   `commbench collectives`, and `--graph --ops sendrecv --strategies ring,ring_naive` (the
   ops that no one-rank run captures in a CUDA graph).

Then README.md states the figures against issue 10's goals: d2d >= 90% of the bare copy
loop, pinned h2d/d2h >= 85% of PCIe Gen5 x16, and issue 46's: the NCCL timer within 3% of
the bare loop's device time at every size, eager and graph. README.md and summary.json are
rewritten after every step, so a check cut short still says how far it got.

Where it goes: `--out DIR` (default results/reference/<gpu-model>/), about 20 files. When
`$OUT` is set (a GPU machine that hands back only a few files from that folder), `$OUT` gets
two files, rewritten after every step: `gpu-check-summary.md` (the README, with the tail of
any failed step's log) and `gpu-check.tar.gz` (the whole directory). Without a CUDA GPU it
says so in one line and exits 2, having written nothing.

    python benchmarks/gpu_check.py            # what `make gpu-check` runs
    python benchmarks/gpu_check.py --detect   # only: is there a GPU to check? (no torch needed)
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # commbench from this checkout, installed or not

EXIT_NO_GPU = 2
EXIT_MISSING = 2

BUDGET_S = 480.0
"""Seconds for the whole check, at worst: a machine lent for 10 minutes also starts up."""
TERM_GRACE_S = 5.0
"""After a step's timeout: SIGTERM to its process group, this long, then SIGKILL, this long."""
KILL_GRACE_S = 2 * TERM_GRACE_S
"""What a step may take past its timeout."""
FINISH_S = 15.0
"""Kept for the figures, the README and the tarball after the last step."""
MIN_STEP_S = 5.0
"""A step the budget would cut below this (or below its own timeout, if shorter) is skipped."""

SUMMARY_NAME = "gpu-check-summary.md"
TARBALL_NAME = "gpu-check.tar.gz"
TAIL_LINES = 15
"""Lines of a failed step's log in the summary: enough to see why without the tarball."""

GOAL_D2D = 0.90  # of a bare torch copy loop, same run
GOAL_HOST = 0.85  # of the PCIe Gen5 x16 rate
GOAL_ALL_REDUCE = 0.03  # commbench's time at most this much above the bare loop's, any size
HARNESS_SIZES = "1K,16K,256K,1M,4M,16M,64M,256M,1G"

NEEDED = {
    "torch": "torch",
    "pynvml": "nvidia-ml-py",
    "typer": "typer",
    "pandas": "pandas",
    "matplotlib": "matplotlib",
    "yaml": "pyyaml",
    "pytest": "pytest",
}
"""Module -> the package that provides it: commbench's dependencies (pyproject.toml), and
pytest for the GPU tests."""

CUDA_DRIVER_FLOOR = {11: 450, 12: 525, 13: 580}
"""CUDA major version -> the oldest Linux driver branch that runs it (NVIDIA's CUDA
compatibility guide, "Minor Version Compatibility")."""


def missing_packages() -> list[str]:
    """The packages whose modules do not import here, in `NEEDED`'s order."""
    return [pkg for mod, pkg in NEEDED.items() if importlib.util.find_spec(mod) is None]


def _smi_driver() -> str | None:
    """The driver version nvidia-smi reports for its first GPU, or None (no GPU, no smi)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    proc = subprocess.run(
        [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.split()
    return lines[0] if proc.returncode == 0 and lines else None


def no_gpu_reason() -> str | None:
    """Why there is nothing to check here, or None when a CUDA GPU is visible. Works before
    anything is installed: torch if importable, else nvidia-smi."""
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return None
        if torch.version.cuda is None:
            return f"no CUDA GPU is visible to torch {torch.__version__} (a CPU build)"
        driver = _smi_driver()
        if driver is None:
            return f"no CUDA GPU is visible to torch {torch.__version__}"
        major = int(torch.version.cuda.split(".")[0])
        floor = CUDA_DRIVER_FLOOR.get(major)
        branch = int(driver.split(".")[0]) if driver.split(".")[0].isdigit() else None
        why = (
            f": its CUDA {major} build needs driver >= {floor}; install a torch built for "
            "this driver (docs/development.md: Which torch for which driver)"
            if floor is not None and branch is not None and branch < floor
            else ""
        )
        return (
            f"no CUDA GPU is visible to torch {torch.__version__} (CUDA {torch.version.cuda}), "
            f"though nvidia-smi lists one with driver {driver}{why}"
        )
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no CUDA GPU here (no torch installed and no nvidia-smi)"
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False).stdout
    return None if "GPU" in listed else "no CUDA GPU here (nvidia-smi lists none)"


def devices() -> list[str]:
    """The names of the CUDA devices torch sees, in ordinal order."""
    import torch

    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


@dataclass(slots=True)
class Step:
    name: str
    cmd: list[str]
    timeout_s: float
    log: str
    stdout: str | None = None
    """File that receives the step's stdout alone (its stderr goes to the log)."""
    rc: int | None = None
    seconds: float = 0.0
    timed_out: bool = False
    skipped: bool = False
    """Never started: the budget was spent."""

    @property
    def result(self) -> str:
        if self.skipped:
            return "skipped (budget spent)"
        if self.timed_out:
            return "timed out"
        return "ok" if self.rc == 0 else f"exit {self.rc}"


def worst_case_s(planned: list[Step]) -> float:
    """The longest the check can take: every step to its timeout and a kill's grace, then
    the packing. `plan` keeps this within BUDGET_S."""
    return sum(s.timeout_s + KILL_GRACE_S for s in planned) + FINISH_S


def step_limit(step: Step, left_s: float) -> float:
    """How long `step` may run with `left_s` seconds of the budget left: its own timeout, cut
    so that its kill's grace and the final packing still fit."""
    return min(step.timeout_s, left_s - KILL_GRACE_S - FINISH_S)


def run_step(step: Step, out: Path, deadline: float) -> None:
    """Run one step in its own process group, within its timeout and the overall deadline;
    on expiry the whole group (torchrun and its workers too) is stopped."""
    from commbench.launch.pythonpath import with_package_path

    limit = step_limit(step, deadline - time.monotonic())
    if limit < min(step.timeout_s, MIN_STEP_S):
        step.skipped = True
        print(f"gpu-check: {step.name}: skipped, budget spent", file=sys.stderr)
        return
    started = time.monotonic()
    with open(out / step.log, "wb") as log:
        stdout = open(out / step.stdout, "wb") if step.stdout else log  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                step.cmd,
                cwd=REPO,
                stdout=stdout,
                stderr=log,
                start_new_session=True,
                env=with_package_path(os.environ),
            )
            try:
                step.rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                step.timed_out = True
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.killpg(proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        proc.wait(timeout=TERM_GRACE_S)
                        break
                    except subprocess.TimeoutExpired:
                        continue
                step.rc = proc.returncode
        finally:
            if stdout is not log:
                stdout.close()
    step.seconds = time.monotonic() - started
    print(f"gpu-check: {step.name}: {step.result} in {step.seconds:.0f} s", file=sys.stderr)


def _harness(out: Path, nproc: int, mode: str, timeout_s: float) -> Step:
    """commbench's timers against a bare loop: on one GPU around an all_gather (a copy), on
    several around an all_reduce and an all_gather across them (issue 46's goal for both)."""
    name = f"harness_nccl_x{nproc}_{mode}"
    return Step(
        f"harness_overhead.py nccl x{nproc} {mode}",
        [
            sys.executable,
            "benchmarks/harness_overhead.py",
            "--backend",
            "nccl",
            "--nproc",
            str(nproc),
            "--sizes",
            HARNESS_SIZES,
            "--ops",
            "all_reduce,all_gather",
            "--rounds",
            "5",
            "--min-time",
            "0.05",
            "--json",
            str(out / f"{name}.json"),
            "--markdown",
            str(out / f"{name}.md"),
            *(["--graph"] if mode == "graph" else []),
        ],
        timeout_s,
        f"{name}.log",
    )


def _collectives(out: Path, nproc: int, name: str, extra: list[str], timeout_s: float) -> Step:
    return Step(
        f"commbench collectives x{nproc}{' ' + ' '.join(extra) if extra else ''}",
        [
            sys.executable,
            "-m",
            "commbench",
            "collectives",
            "--nproc",
            str(nproc),
            "--sizes",
            "1K-64M:x8",
            "--min-time",
            "0.05",
            *extra,
            "--no-plot",
            "-o",
            str(out),
            "-f",
            "md",
        ],
        timeout_s,
        f"{name}.log",
        stdout=f"{name}.md",
    )


GRAPH_PLAN = ["--graph", "--ops", "sendrecv", "--strategies", "ring,ring_naive"]
"""What no one-rank run captures in a CUDA graph: sendrecv and the hand-written rings."""


def plan(out: Path, ngpus: int) -> list[Step]:
    """The steps for a machine with `ngpus` GPUs; `worst_case_s` of it fits BUDGET_S."""
    py = sys.executable
    steps = [
        Step(
            "pytest -m gpu",
            [
                py,
                "-m",
                "pytest",
                "-m",
                "gpu",
                "-q",
                "-p",
                "no:cacheprovider",
                "--junitxml",
                str(out / "pytest-gpu.xml"),
            ],
            # 115 s on an H100 before issue 46 added two NCCL recordings and a replay; with
            # two GPUs the other steps take the rest of the budget
            210 if ngpus < 2 else 180,
            "pytest-gpu.log",
        ),
        Step(
            "p2p_single_gpu.py",
            [py, "benchmarks/p2p_single_gpu.py", "--json", str(out / "p2p_single_gpu.json")],
            20,  # 10 s on an H100
            "p2p_single_gpu.log",
        ),
        _harness(out, 1, "eager", 35),  # 18 s on an H100 at six sizes, nine now
        _harness(out, 1, "graph", 35),
        Step(
            "commbench p2p --host --latency",
            [py, "-m", "commbench", "p2p", "--host", "--latency", "-o", str(out), "-f", "md"],
            15,  # 6 s on an H100
            "p2p.log",
            stdout="p2p.md",
        ),
    ]
    if ngpus >= 2:
        steps += [
            _harness(out, ngpus, "eager", 30),
            _collectives(out, ngpus, "collectives", [], 30),
            _collectives(out, ngpus, "collectives-graph", GRAPH_PLAN, 30),
        ]
    return steps


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def figures(
    p2p: dict[str, Any] | None,
    harness: dict[str, dict[str, Any] | None],
    gen5_gbps: float,
) -> list[tuple[str, str, str, str]]:
    """(figure, measured, goal, met) rows from the benchmarks' JSON outputs; a missing output
    gives a row saying so, never a guessed number."""
    rows: list[tuple[str, str, str, str]] = []
    kinds = (p2p or {}).get("kinds", {})
    d2d = kinds.get("d2d")
    if d2d is None:
        rows.append(
            ("d2d copy vs a bare torch copy loop", "not measured", f">= {GOAL_D2D:.0%}", "-")
        )
    else:
        ok = d2d["ratio"] >= GOAL_D2D
        rows.append(
            (
                "d2d copy vs a bare torch copy loop (same run)",
                f"{d2d['ratio']:.1%} ({d2d['commbench_gbps']:.1f} vs {d2d['bare_gbps']:.1f} GB/s)",
                f">= {GOAL_D2D:.0%}",
                "yes" if ok else "NO",
            )
        )
    for kind in ("h2d", "d2h"):
        entry = kinds.get(kind)
        name = f"pinned {kind} vs PCIe Gen5 x16 ({gen5_gbps:.1f} GB/s)"
        if entry is None:
            rows.append((name, "not measured", f">= {GOAL_HOST:.0%}", "-"))
            continue
        fraction = entry["commbench_gbps"] / gen5_gbps
        rows.append(
            (
                name,
                f"{fraction:.1%} ({entry['commbench_gbps']:.1f} GB/s)",
                f">= {GOAL_HOST:.0%}",
                "yes" if fraction >= GOAL_HOST else "NO",
            )
        )
    for label, data in harness.items():
        what = (data or {}).get("op", "all_reduce")
        sizes = (data or {}).get("sizes", [])
        if not sizes:
            name = f"NCCL {what} ({label}): commbench / bare loop - 1"
            rows.append((name, "not measured", f"<= +{GOAL_ALL_REDUCE:.0%}", "-"))
            continue
        for s in sizes:
            # one rank names its one op by what it is (a device copy); more, each size's op
            op = what if (data or {}).get("nproc", 1) == 1 else s.get("op", what)
            name = f"NCCL {op} ({label}): commbench / bare loop - 1"
            over = s["timer_overhead"]
            issued = s.get("bare_issue_ops_per_s")
            host = f"; the host issues {issued:,.0f} ops/s" if issued else ""
            behind = s.get("uncovered_batches")
            fell = f"; the host fell behind in {behind} of {s['batches']} batches" if behind else ""
            rows.append(
                (
                    f"{name}, {_size(s['size'])}",
                    f"{over:+.2%} ({s['commbench_mean_us']:.2f} vs {s['bare_mean_us']:.2f} us"
                    f"{host}{fell})",
                    f"<= +{GOAL_ALL_REDUCE:.0%}",
                    "yes" if over <= GOAL_ALL_REDUCE else "NO",
                )
            )
    return rows


def _size(n: int) -> str:
    from commbench.sizes import format_size

    return format_size(n)


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-TAIL_LINES:]) or "(empty log)"


def render_readme(
    model: str,
    context: dict[str, Any],
    rows: list[tuple[str, str, str, str]],
    done: list[Step],
    out: Path | None = None,
) -> str:
    """The README: the figures, every step so far, and (given `out`, where the logs are) the
    last lines of each failed step's log."""
    lines = [
        f"# GPU reference: {model}",
        "",
        f"Written by `make gpu-check` (benchmarks/gpu_check.py) on {context['date']}: "
        f"torch {context['torch']}, CUDA {context['cuda']}, NCCL {context['nccl']}, "
        f"driver {context.get('driver', 'unknown')}, {context.get('gpus', 1)} GPU(s), "
        f"commit {context['commit']}. Goals from issues 10 and 46.",
        "",
        "| figure | measured | goal | met |",
        "|---|---:|---:|:---:|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
        "",
        "## Steps",
        "",
        "| step | result | seconds | output |",
        "|---|---|---:|---|",
    ]
    for s in done:
        files = ", ".join(f"`{f}`" for f in (s.log, s.stdout) if f)
        lines.append(f"| {s.name} | {s.result} | {s.seconds:.0f} | {files} |")
    lines += [
        "",
        "Run directories of `commbench collectives` and `commbench p2p` sit beside this file; "
        "`harness_nccl_*.md` and `p2p_single_gpu.json` hold the per-round figures.",
    ]
    failed = [s for s in done if not s.skipped and (s.timed_out or s.rc != 0)]
    if out is not None and failed:
        lines += ["", "## Failed steps: the end of their logs"]
        for s in failed:
            lines += ["", f"### {s.name} ({s.result})", "", "```", _tail(out / s.log), "```"]
    return "\n".join(lines) + "\n"


def slug(model: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "gpu"


def _replace(path: Path, write: Any) -> None:
    """Write `path` through a temporary beside it, so a reader never sees half a file."""
    part = path.with_name(path.name + ".part")
    write(part)
    os.replace(part, path)


def write_summary(
    out: Path,
    deliver: Path | None,
    model: str,
    context: dict[str, Any],
    done: list[Step],
) -> str:
    """README.md and summary.json in `out` from what the steps left so far; with `deliver`
    (`$OUT`), also its two files: the summary and a tarball of `out`. Called after every
    step, so a check cut short still hands back how far it got."""
    from commbench.topology import rates

    gen5 = rates.pcie_gbps(5, 16)
    assert gen5 is not None
    harness = {
        f"{m.group(1)} rank(s), {m.group(2)}": _load(p)
        for p in sorted(out.glob("harness_nccl_x*_*.json"))
        if (m := re.fullmatch(r"harness_nccl_x(\d+)_(\w+)\.json", p.name))
    } or {"1 rank(s), eager": None, "1 rank(s), graph": None}
    rows = figures(_load(out / "p2p_single_gpu.json"), harness, gen5)
    text = render_readme(model, context, rows, done, out)
    (out / "README.md").write_text(text)
    summary = {
        "context": context,
        "figures": [dict(zip(("figure", "measured", "goal", "met"), r)) for r in rows],
        "steps": [
            {
                "name": s.name,
                "rc": s.rc,
                "timed_out": s.timed_out,
                "skipped": s.skipped,
                "seconds": s.seconds,
            }
            for s in done
        ],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if deliver is not None:
        _replace(deliver / SUMMARY_NAME, lambda p: p.write_text(text))

        def pack(p: Path) -> None:
            with tarfile.open(p, "w:gz") as tar:
                tar.add(out, arcname=out.name)

        _replace(deliver / TARBALL_NAME, pack)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--detect", action="store_true", help="only check that a GPU is visible")
    parser.add_argument("--out", type=Path, help="default: results/reference/<gpu-model>")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds for all steps")
    args = parser.parse_args(argv)
    reason = no_gpu_reason()
    if reason is not None:
        print(f"gpu-check: {reason}; it needs a machine with an NVIDIA GPU", file=sys.stderr)
        return EXIT_NO_GPU
    if args.detect:
        return 0
    missing = missing_packages()
    if missing:
        print(
            f"gpu-check: missing Python packages: {', '.join(missing)} (it installs nothing; "
            "for torch choose the build for this driver: docs/development.md, Which torch for which driver)",
            file=sys.stderr,
        )
        return EXIT_MISSING

    import torch

    names = devices()
    model = names[0]
    deliver = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    scratch = None
    if args.out is not None:
        out = args.out
    elif deliver is not None:  # only the tarball leaves: the tree is scratch
        scratch = tempfile.TemporaryDirectory(prefix="gpu-check-")
        out = Path(scratch.name) / slug(model)
    else:
        out = REPO / "results" / "reference" / slug(model)
    if out.exists():
        shutil.rmtree(out)  # a reference is one run's evidence, never mixed with an older one
    out.mkdir(parents=True)
    if deliver is not None:
        deliver.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # NCCL absent from this build
        nccl = "none"
    context = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "commit": commit or "unknown",
        "driver": _smi_driver() or "unknown",
        "model": model,
        "gpus": len(names),
    }
    planned = plan(out, len(names))
    done: list[Step] = []
    try:
        for step in planned:
            run_step(step, out, deadline)
            done.append(step)
            write_summary(out, deliver, model, context, done)
        text = write_summary(out, deliver, model, context, done)
    finally:
        if scratch is not None:
            scratch.cleanup()
    print(text)
    where = f"{deliver / SUMMARY_NAME} and {deliver / TARBALL_NAME}" if deliver else str(out)
    print(f"gpu-check: written to {where}", file=sys.stderr)
    # a goal not met is in the README (p2p_single_gpu.py also exits 1 for it); a step that
    # failed, timed out or never ran is a failure of the check itself
    goal_only = {"p2p_single_gpu.py": 1}
    failed = [
        s for s in done if s.skipped or s.timed_out or s.rc not in (0, goal_only.get(s.name, 0))
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
