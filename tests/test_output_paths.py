"""An output path is never an input's own file (issue 24, A1): every command that writes a
file a user names refuses, in one line and exit 2, a path that is a file of a run it reads
(by name, through a symlinked directory, or as a hard link) or the record of any run, and
leaves that file as it was."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from commbench.cli import app
from tests.factories import one_op_copy

RUNS = Path(__file__).parent / "fixtures" / "runs"
SNAPSHOT = Path(__file__).parent / "fixtures" / "p2p" / "snapshot_puzzle8.json"
SMI = Path(__file__).parent / "fixtures" / "topology" / "smi_5gpu_sys_phb_node.txt"


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_refused(result: Result, *fragments: str) -> None:
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert len(lines) == 1 and lines[0].startswith("commbench: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Path]:
    """Copies of two comparable runs and one with a topology, each with a file of its own
    beyond the records (a log), so that nothing a test does touches the fixtures."""
    out = {}
    for name, fixture in (("a", "cpu-gloo-a"), ("b", "cpu-gloo-b"), ("gpu", "h100x8-golden")):
        out[name] = shutil.copytree(RUNS / fixture, tmp_path / name)
        (out[name] / "launcher.log").write_text("the launcher's log\n")
    return out


class Files:
    """Every file under some directories, to tell that a refused command changed none."""

    def __init__(self, *dirs: Path) -> None:
        self.dirs = dirs
        self.before = self.now()

    def now(self) -> dict[Path, bytes]:
        return {p: p.read_bytes() for d in self.dirs for p in sorted(d.rglob("*")) if p.is_file()}

    def unchanged(self) -> bool:
        return self.now() == self.before


# -- the reported cases: a command writes over the very run it reads --------------------------


@pytest.mark.parametrize("name", ["run.json", "results.csv", "results.json", "launcher.log"])
def test_report_refuses_a_file_of_the_run_it_reads(runs: dict[str, Path], name: str) -> None:
    files = Files(runs["a"])
    assert_refused(cli("report", runs["a"], "-o", runs["a"] / name), "--out", name)
    assert files.unchanged()


def test_report_may_write_a_new_file_into_the_run_it_reads(tmp_path: Path) -> None:
    """... and rewrite it: a report is derived from the run, never read back."""
    run = one_op_copy(RUNS / "cpu-gloo-a", tmp_path / "a")  # one figure to draw
    for images in ("none", "files", "none"):
        result = cli("report", run, "--images", images, "-o", run / "report.md")
        assert result.exit_code == 0, result.stderr
        assert (run / "report.md").read_text().startswith("#")


def test_report_refuses_the_baseline_s_files_too(runs: dict[str, Path]) -> None:
    files = Files(runs["b"])
    out = runs["b"] / "results.json"
    assert_refused(cli("report", runs["a"], "--baseline", runs["b"], "-o", out), "--out")
    assert files.unchanged()


@pytest.mark.parametrize("name", ["results.json", "run.json", "launcher.log"])
def test_compare_refuses_a_file_of_either_run(runs: dict[str, Path], name: str) -> None:
    files = Files(runs["a"], runs["b"])
    for target in (runs["b"] / name, runs["a"] / name):
        assert_refused(cli("compare", runs["a"], runs["b"], "-o", target), "--out")
    assert files.unchanged()


def test_topo_refuses_the_run_it_reads_its_topology_from(runs: dict[str, Path]) -> None:
    files = Files(runs["gpu"])
    for source in (runs["gpu"], runs["gpu"] / "run.json"):
        result = cli(
            "topo", "--from", source, "--format", "json", "--out", runs["gpu"] / "run.json"
        )
        assert_refused(result, "--out")
    assert_refused(cli("topo", "--from", runs["gpu"], "--out", runs["gpu"] / "launcher.log"))
    assert files.unchanged()


def test_topo_refuses_the_snapshot_or_matrix_it_reads(tmp_path: Path) -> None:
    snap = Path(shutil.copy(SNAPSHOT, tmp_path / "snap.json"))
    smi = Path(shutil.copy(SMI, tmp_path / "topo.txt"))
    files = Files(tmp_path)
    assert_refused(cli("topo", "--from", snap, "--out", snap), "--out", "snap.json")
    assert_refused(cli("topo", "--from-smi", smi, "--out", smi), "--out", "topo.txt")
    assert files.unchanged()


def test_plot_refuses_a_figure_that_is_a_record(runs: dict[str, Path], tmp_path: Path) -> None:
    """plot writes `<figure>.<format>` files: one that is a link to a run's record (of the run
    plotted, or of any other) is refused before a figure is drawn over it."""
    from commbench.report.figures import all_figures
    from commbench.report.plots import figure_file
    from commbench.results.runs import load_run

    # the name plot gives its first figure (test_plot.py checks what plot writes)
    figure = figure_file(Path(), all_figures([load_run(runs["a"])])[0], "png").name
    files = Files(runs["a"], runs["b"])
    for record in (runs["a"] / "results.json", runs["b"] / "run.json"):
        out = tmp_path / f"out-{record.parent.name}"
        out.mkdir()
        os.symlink(record, out / figure)
        assert_refused(cli("plot", runs["a"], "-o", out, "--formats", "png"), "--out")
    hard = tmp_path / "hard"
    hard.mkdir()
    os.link(runs["a"] / "results.csv", hard / figure)
    assert_refused(cli("plot", runs["a"], "-o", hard, "--formats", "png"), "--out")
    assert files.unchanged()


def test_plot_still_redraws_a_run_s_own_figures(tmp_path: Path) -> None:
    run = one_op_copy(RUNS / "cpu-gloo-a", tmp_path / "a")  # one figure to draw
    for _ in range(2):
        result = cli("plot", run, "--formats", "png")
        assert result.exit_code == 0, result.stderr
    assert list((run / "plots").glob("*.png"))


# -- hard links, symlinked directories, suites, the record of any run ------------------------


def test_a_hard_link_to_an_input_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    link = tmp_path / "out.md"
    os.link(runs["a"] / "run.json", link)
    files = Files(runs["a"])
    assert_refused(cli("report", runs["a"], "-o", link), "--out")
    assert_refused(cli("compare", runs["b"], runs["a"], "-o", link), "--out")
    assert files.unchanged()


def test_a_hard_link_to_the_record_of_another_run_is_refused(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """A run that is not read, its run.json under another name: writing through the link
    would change it all the same."""
    link = tmp_path / "out.md"
    os.link(runs["gpu"] / "run.json", link)
    files = Files(runs["gpu"])
    assert_refused(cli("report", runs["a"], "--images", "none", "-o", link), "--out")
    assert_refused(cli("topo", "--from", SNAPSHOT, "--out", link), "--out")
    assert files.unchanged()


def test_a_symlinked_directory_is_seen_through(runs: dict[str, Path], tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(runs["a"], target_is_directory=True)
    files = Files(runs["a"])
    assert_refused(cli("report", runs["a"], "-o", alias / "run.json"), "--out")
    assert_refused(cli("report", alias, "-o", runs["a"] / "results.csv"), "--out")
    assert_refused(cli("compare", runs["b"], alias, "-o", alias / "results.json"), "--out")
    assert files.unchanged()


@pytest.mark.parametrize("name", ["run.json", "results.csv", "results.json", "events.jsonl"])
def test_the_records_of_any_run_are_refused(
    runs: dict[str, Path], tmp_path: Path, name: str
) -> None:
    """The generic case: a run the command does not read at all is still a run."""
    other = shutil.copytree(RUNS / "cpu-gloo-b", tmp_path / "other")
    (other / "events.jsonl").write_text("{}\n")
    files = Files(other)
    assert_refused(cli("report", runs["a"], "--images", "none", "-o", other / name), "--out")
    assert_refused(cli("compare", runs["a"], runs["b"], "-o", other / name), "--out")
    assert_refused(cli("topo", "--from", runs["gpu"], "--out", other / name), "--out")
    assert files.unchanged()


def _suite(tmp_path: Path, runs: dict[str, Path], name: str) -> Path:
    from commbench.results.record import Entry, RunStatus, SuiteRecord
    from commbench.results.store import SuiteDir

    suite = tmp_path / name
    suite.mkdir()
    done = RunStatus.COMPLETE
    SuiteDir(suite).write_record(
        SuiteRecord(
            name=name,
            status=done,
            entries=[
                # an entry outside the suite directory is read all the same
                Entry(name="collectives-float32", section="collectives", path="../a", status=done)
            ],
        )
    )
    return suite


def test_a_suite_s_record_and_its_entries_are_refused(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    suite = _suite(tmp_path, runs, "s1")
    other = _suite(tmp_path, runs, "s2")
    files = Files(suite, runs["a"])
    assert_refused(cli("report", suite, "--images", "none", "-o", suite / "suite.json"))
    assert_refused(cli("report", suite, "--images", "none", "-o", runs["a"] / "results.json"))
    assert_refused(cli("compare", suite, other, "-o", other / "suite.json"), "--out")
    assert files.unchanged()


def test_report_s_image_files_are_checked_too(runs: dict[str, Path], tmp_path: Path) -> None:
    """--images files writes PNGs in `<stem>_files/` beside the report: one that is a link
    to a record is refused like the report itself."""
    a = one_op_copy(RUNS / "cpu-gloo-a", tmp_path / "a1")  # one figure to draw
    first = cli("report", a, "--images", "files", "-o", tmp_path / "r" / "x.md")
    assert first.exit_code == 0, first.stderr
    png = next((tmp_path / "r" / "x_files").glob("*.png")).name
    folder = tmp_path / "s" / "x_files"
    folder.mkdir(parents=True)
    (folder / png).symlink_to(runs["b"] / "run.json")
    files = Files(runs["b"])
    result = cli("report", a, "--images", "files", "-o", tmp_path / "s" / "x.md")
    assert_refused(result, "--out")
    assert files.unchanged()
    assert not (tmp_path / "s" / "x.md").exists(), "nothing written before the refusal"


def test_an_ordinary_output_is_written_and_rewritten(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.md"
    for _ in range(2):
        result = cli("compare", runs["a"], runs["b"], "-f", "md", "-o", out)
        assert result.exit_code in (0, 1), result.stderr
    assert out.read_text()
    result = cli("topo", "--from", runs["gpu"], "--format", "json", "--out", tmp_path / "t.json")
    assert result.exit_code == 0, result.stderr


def test_the_library_refuses_what_the_commands_refuse(runs: dict[str, Path]) -> None:
    """The rule itself, for a writer added later."""
    from commbench.errors import UserError
    from commbench.results.store import check_output

    with pytest.raises(UserError, match="--out"):
        check_output([runs["a"] / "launcher.log"], [runs["a"] / "run.json"])
    check_output([runs["a"] / "new.md"], [runs["a"]])  # a new file beside the records
    check_output([runs["a"] / "plots" / "x.png"], [runs["a"]])  # a run's figures are redrawn
