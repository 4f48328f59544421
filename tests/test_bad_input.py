"""Bad input of every class through the console script's entry point: exactly one line
`commbench: error: ...` on stderr, exit 2, no traceback, and nothing created under --out.

The classes (issue 11): non-finite and enormous numbers, digits that are not ASCII, input
that was silently accepted, and errors that took two lines. Each row is what a user could
type; the fragment is what the line must say.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.cli import main

HUGE = "9" * 400
SUITE_OK = "collectives: {ops: [all_reduce], sizes: 1K}\n"

# (argv, fragment); {out} is an empty directory that must stay empty, {dir} holds the files
# written by the `files` fixture.
CASES: dict[str, list[tuple[list[str], str]]] = {
    "non-finite and enormous numbers": [
        (["collectives", "--sizes", "1K-1M:xinf"], "malformed step 'xinf'"),
        (["collectives", "--sizes", "1K-1M:xnan"], "malformed step 'xnan'"),
        (["collectives", "--sizes", "1K-1M:x1e400"], "malformed step 'x1e400'"),
        (["collectives", "--sizes", "1K-1M:x1e308"], "malformed step"),
        (["collectives", "--sizes", "inf"], "malformed size 'inf'"),
        (["collectives", "--sizes", "1e400"], "malformed size '1e400'"),
        (["collectives", "--sizes", HUGE], "is larger than 1024T"),
        (["collectives", "--sizes", f"1K-{HUGE}"], "is larger than 1024T"),
        (["collectives", "--sizes", "1025T"], "is larger than 1024T"),
        (["collectives", "--sizes", "1.0000000000000000000000001K"], "not a whole number"),
        (["collectives", "--iters", "99999999999999999999999"], "--iters must be <= 1000000"),
        (["collectives", "--warmup", "99999999999999999999999"], "--warmup must be <= 1000000"),
        (["collectives", "--nproc", HUGE[:30]], "--nproc must be <="),
        (["collectives", "--nnodes", HUGE[:30]], "--nnodes must be <= 65536"),
        (["collectives", "--timeout", "1e400"], "--timeout must be a finite number"),
        (["collectives", "--skew", "zipf:1e400"], "--skew zipf:S must be a finite number"),
        (["collectives", "--skew", "hot:inf"], "--skew hot:F: expected a number"),
        (["collectives", "--seed", HUGE[:30]], "--seed must be <= 9223372036854775807"),
        (["model", "--bw", "10", "--latency", "1", "--sizes", "1K-1M:xinf"], "malformed step"),
        (["model", "--bw", "10", "--latency", "1", "--sizes", "1K-1M:xnan"], "malformed step"),
        (["model", "--bw", "10", "--latency", "1", "--sizes", HUGE], "larger than 1024T"),
        (["model", "--bw", "1e308", "--latency", "1"], "bandwidth (GB/s) must be <="),
        (["model", "--bw", "10", "--latency", "1e308"], "latency (us) must be <="),
        (["model", "--bw", "10", "--latency", "1", "--world", HUGE[:20]], "--world must be <="),
        (["p2p", "--dry-run", "--size", "1K-1M:xinf"], "malformed step"),
        (["p2p", "--dry-run", "--size", "nan"], "malformed size 'nan'"),
        (["p2p", "--dry-run", "--size", HUGE], "larger than 1024T"),
        (["p2p", "--dry-run", "--dst", HUGE], "is not a GPU index"),
        (["slurm-script", "--", "collectives", "--sizes", "1K-1M:xinf"], "malformed step"),
        (["slurm-script", "--", "collectives", "--sizes", HUGE], "larger than 1024T"),
        (["slurm-script", "--nodes", HUGE[:20]], "--nodes must be <= 65536"),
        (["run", "{dir}/inf.yaml"], "collectives.sizes: malformed step 'xinf'"),
        (["run", "{dir}/huge.yaml"], "an integer of 400 characters"),
        (["run", "{dir}/huge_list.yaml"], "an integer of 400 characters"),
        (["run", "{dir}/huge_quoted.yaml"], "collectives.sizes: size '9999"),
        (["run", "{dir}/iters.yaml"], "collectives.iters: must be at most 1000000"),
        (["run", "{dir}/nan.yaml"], "collectives.min_time: must be positive, got nan"),
        (["run", "{dir}/tolerance_inf.yaml"], "compare.tolerance: expected a percentage"),
        (["compare", "{dir}", "{dir}", "--tolerance", "inf"], "--tolerance: expected a percent"),
    ],
    "digits that are not ASCII": [
        (["collectives", "--sizes", "\uff11K"], "malformed size"),  # fullwidth 1
        (["collectives", "--sizes", "1K-\uff11M"], "malformed size"),
        (["collectives", "--sizes", "\u0664K"], "malformed size"),  # Arabic-Indic 4
        (["collectives", "--sizes", "1K-1M:x\uff12"], "malformed step"),
        (["collectives", "--sizes", "\u00b2K"], "malformed size"),  # superscript 2
        (["collectives", "--ranks", "\uff10,1"], "--ranks must be a comma list"),
        (["collectives", "--rdzv-endpoint", "localhost:\u00b2"], "--rdzv-endpoint must be"),
        (["collectives", "--nnodes", "2", "--rdzv-endpoint", "h:\uff11\uff12"], "--rdzv-endpoint"),
        (["collectives", "--rdzv-endpoint", "h\uff11:29400"], "--rdzv-endpoint must be"),
        (["p2p", "--dry-run", "--dst", "\u00b2"], "is not a GPU index"),
        (["p2p", "--dry-run", "--dst", "\uff11"], "is not a GPU index"),
        (["p2p", "--dry-run", "--src", "\u00b2"], "expected a GPU index"),
        (["p2p", "--dry-run", "--size", "\uff11K"], "malformed size"),
        (["model", "--bw", "1", "--latency", "1", "--sizes", "\uff11K"], "malformed size"),
        (["model", "--bw", "1", "--latency", "1", "--world", "\uff18"], "--world must be"),
        (["compare", "{dir}", "{dir}", "--tolerance", "\uff15%"], "--tolerance: expected"),
        (["slurm-script", "--time", "\uff12:00"], "is not a SLURM time"),
        (["slurm-script", "--time", "1:\u0660\u0660"], "is not a SLURM time"),
        (["slurm-script", "--", "collectives", "--sizes", "\uff11K"], "malformed size"),
        (["run", "{dir}/unicode.yaml"], "collectives.sizes: malformed size"),
    ],
    "silent acceptance": [
        (["collectives", "--nnodes", "0"], "--nnodes must be >= 1"),
        (["collectives", "--timeout", "0.001"], "--timeout must be at least 2 s"),
        (["slurm-script", "--", "collectives", "--dtype", "float128"], "unknown dtype"),
        (["collectives", "--dtype", "float32,nope"], "unknown dtype 'nope'"),
        (["collectives", "--dtype", ","], "--dtype ',': item 1 of 2 is empty"),
        (["collectives", "--in-place", "maybe"], "--in-place must be one of no, yes, both"),
        (["slurm-script", "--", "collectives", "--dtype", "float32,nope"], "unknown dtype"),
        (["slurm-script", "--", "collectives", "--in-place", "maybe"], "--in-place must be"),
        (["run", "{dir}/in_place.yaml"], "collectives.in_place: expected true, false or both"),
        (["slurm-script", "--", "collectives", "--nproc", "0"], "--nproc must be >= 1, got 0"),
        (["slurm-script", "--", "collectives", "--timeout", "-5"], "--timeout must be >= 0"),
        (["slurm-script", "--", "collectives", "--timeout", "0.5"], "--timeout must be at least"),
        (
            ["slurm-script", "--", "collectives", "--min-time", "nan"],
            "--min-time: expected a number",
        ),
        (["slurm-script", "--", "collectives", "--strategies", "bogus"], "unknown strategy"),
        (["slurm-script", "--", "collectives", "--backend", "mpi"], "unknown backend 'mpi'"),
        (["slurm-script", "--", "collectives", "--reduce-op", "xor"], "unknown reduce op"),
        (["slurm-script", "--", "collectives", "--ops", "allgather"], "unknown op"),
        (
            ["slurm-script", "--gpus-per-node", "0", "--", "collectives", "--device", "cuda"],
            "--device cuda runs 2 GPU rank(s) per node",
        ),
        (
            ["slurm-script", "--gpus-per-node", "4", "--", "collectives", "--nproc", "8"],
            "--device cuda runs 8 GPU rank(s) per node",
        ),
        (["slurm-script", "--", "run", "{dir}/ok.yaml", "--nproc", "0"], "--nproc must be"),
        (["slurm-script", "--", "run", "{dir}/ok.yaml", "--backend", "mpi"], "unknown backend"),
        (["slurm-script", "--", "run", "{dir}/timeout.yaml"], "collectives.timeout: must be at"),
        (["run", "{dir}/world.yaml", "--device", "cpu"], "more than 8 CPU ranks per core"),
        (["run", "{dir}/timeout.yaml", "--device", "cpu"], "collectives.timeout: must be at"),
        (["collectives", "--out", "{dir}/run"], "is a run directory"),
        (["collectives", "--out", "{dir}/suite"], "is a suite directory"),
        (["run", "{dir}/ok.yaml", "--device", "cpu", "--out", "{dir}/run"], "is a run directory"),
        (["p2p", "--out", "{dir}/run"], "is a run directory"),
        (["import", "nccl-tests", "{dir}/ok.yaml", "--out", "{dir}/run"], "is a run directory"),
        (["plot", "{dir}/run", "--formats", ""], "--formats is empty"),
        (["plot", "{dir}/run", "--formats", " , "], "item 1 of 2 is empty"),
        # every list option refuses an empty item alike, naming it
        (["collectives", "--ranks", "0,,1"], "--ranks '0,,1': item 2 of 3 is empty"),
        (
            ["model", "--world", "8,,64", "--bw", "100", "--latency", "5"],
            "--world '8,,64': item 2 of 3 is empty",
        ),
        (["collectives", "--ops", "all_reduce,"], "--ops 'all_reduce,': item 2 of 2 is empty"),
        (["p2p", "--dst", "1,,2"], "--dst '1,,2': item 2 of 3 is empty"),
        (["diagnose", "--stages", "intra-node,,inter-node"], "--stages"),
        (
            ["model", "--world", ",".join(["8"] * 300), "--bw", "100", "--latency", "5"],
            "--world: 300 items, more than 256",
        ),
        (["collectives", "--ranks", ",".join(["0"] * 5000)], "--ranks: 5000 items, more than 4096"),
    ],
    "two-line errors": [
        (["run", "{dir}/ok.yaml", "--device", "cpu", "--out", "{dir}/file"], "is a file"),
        (["run", "{dir}/ok.yaml", "--device", "cpu", "--out", "{dir}/file/x"], "is a file"),
        (["run", "{dir}/ok.yaml", "--device", "cpu", "--baseline", "{dir}/none"], "no such"),
        (["run", "{dir}/ok.yaml", "--device", "cpu", "--baseline", "{dir}/bad"], "not valid JSON"),
        (["run", "{dir}/binary.yaml"], "not UTF-8 text"),
        (["run", "{dir}/control.yaml"], "not valid YAML (character 4)"),
        (["run", "{dir}/unclosed.yaml"], "not valid YAML (line 2)"),
        (["collectives", "--out", "{dir}/" + "x" * 300], "File name too long"),
    ],
}


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """Suites, a run directory and other inputs the cases name as {dir}."""
    d = tmp_path / "files"
    d.mkdir()
    ops = "collectives: {ops: [all_reduce], "
    suites = {
        "ok.yaml": SUITE_OK,
        "inf.yaml": ops + "sizes: '1K-1M:xinf'}\n",
        "in_place.yaml": ops + "in_place: maybe}\n",
        "huge.yaml": ops + f"sizes: {HUGE}}}\n",
        "huge_list.yaml": ops + f"sizes: [1024, {HUGE}]}}\n",
        "huge_quoted.yaml": ops + f"sizes: '{HUGE}'}}\n",
        "iters.yaml": ops + "sizes: 1K, iters: 99999999999999999999}\n",
        "nan.yaml": ops + "sizes: 1K, min_time: .nan}\n",
        "timeout.yaml": ops + "sizes: 1K, timeout: 0.001}\n",
        "unicode.yaml": ops + "sizes: '\uff11K'}\n",
        "world.yaml": "world_size: 100000\n" + SUITE_OK,
        "tolerance_inf.yaml": SUITE_OK + "compare: {tolerance: .inf}\n",
        "unclosed.yaml": "a: [1, 2\n",
    }
    for name, text in suites.items():
        (d / name).write_text(text)
    (d / "binary.yaml").write_bytes(b"\x7fELF\x02\x01\xff\xfe\x00")
    (d / "control.yaml").write_bytes(b'a: "\x01"\n')
    (d / "file").write_text("")
    golden = Path(__file__).parent / "fixtures"
    run = next(p.parent for p in sorted(golden.rglob("run.json")))
    shutil.copytree(run, d / "run")
    (d / "suite").mkdir()
    (d / "suite" / "suite.json").write_text("{}")
    (d / "bad").mkdir()
    (d / "bad" / "run.json").write_text("{")
    return d


def _cases() -> list[object]:
    return [
        pytest.param(argv, fragment, id=f"{cls}: {' '.join(argv)[:60]}")
        for cls, rows in CASES.items()
        for argv, fragment in rows
    ]


@pytest.mark.integration
@pytest.mark.parametrize(("argv", "fragment"), _cases())
def test_bad_input_is_one_line_exit_2_and_creates_nothing(
    argv: list[str],
    fragment: str,
    files: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = tmp_path / "out"
    out.mkdir()
    args = [a.replace("{dir}", str(files)).replace("{out}", str(out)) for a in argv]
    writes = args[0] in ("collectives", "p2p", "run") and "--out" not in args
    if writes:
        args += ["--out", str(out)]
    before = sorted(p.name for p in files.rglob("*"))
    monkeypatch.setattr(sys, "argv", ["commbench", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert exit_info.value.code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("commbench: error: ") and fragment in lines[0], lines[0]
    assert list(out.iterdir()) == []
    assert sorted(p.name for p in files.rglob("*")) == before


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"SLURM_JOB_NODELIST": "n[\u00b2]"}, "malformed SLURM node range"),
        ({"SLURM_JOB_NODELIST": "n[\uff11-\uff12]"}, "malformed SLURM node range"),
        ({"SLURM_JOB_NODELIST": "n[0-30000000]"}, "names more than 65536 nodes"),
        ({"SLURM_JOB_NODELIST": "r[0-999]n[0-999]"}, "names more than 65536 nodes"),
        ({"SLURM_JOB_NODELIST": "n[" + "9" * 5000 + "]"}, "malformed SLURM node range"),
        ({"SLURM_JOB_NODELIST": "n[5-1]"}, "malformed SLURM node range"),
        ({"SLURM_NODEID": "\u00b2"}, "SLURM_NODEID: expected a whole number"),
        ({"SLURM_NODEID": "\uff11"}, "SLURM_NODEID: expected a whole number"),
        ({"SLURM_NNODES": "9" * 5000}, "SLURM_NNODES: expected a whole number"),
        ({"SLURM_NNODES": "0"}, "SLURM_NNODES must be >= 1"),
    ],
)
def test_a_bad_slurm_environment_is_one_line(
    env: dict[str, str],
    fragment: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = {"SLURM_JOB_ID": "42", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "n[1-2]"}
    for key, value in {**job, **env}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(sys, "argv", ["commbench", "collectives", "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit) as exit_info:
        main()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert exit_info.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("commbench: error: malformed SLURM") or "SLURM" in lines[0]
    assert fragment in lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.integration
def test_an_unwritable_out_is_refused_before_the_suite_starts(files: Path, tmp_path: Path) -> None:
    """A directory even root cannot write into (immutable): one line, before the banner."""
    locked = tmp_path / "locked"
    locked.mkdir()
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(locked)]).returncode:
        pytest.skip("needs chattr +i (root on a file system that supports it)")
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "commbench",
                "run",
                str(files / "ok.yaml"),
                "--out",
                str(locked),
            ],
            capture_output=True,
            text=True,
        )
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("commbench: error: --out ") and "cannot write under" in line
