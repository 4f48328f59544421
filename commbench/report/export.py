"""`commbench export`'s writers: one interface, chosen by `--format`.

An exporter takes an `ExportSource` (the run, and what the command added to it: a diagnose
run's verdicts, the regression gate against a baseline) and returns the text. A new format
is an entry of the format registry (`commbench.formats.FORMATS`) that writes `Writes.EXPORT`
(its writer, how `--help` names it, what it can hold) and its writer here; the command, the
API verb, their checks and docs/cli.md take it from there. The exporters import what they
need when they run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.formats import FORMATS, Writes, names, write

if TYPE_CHECKING:
    from commbench.compare import Gate
    from commbench.diagnose.verdict import Diagnosis
    from commbench.report.requests import ExportRequest
    from commbench.results.openmetrics import Family
    from commbench.results.runs import Run


@dataclass(frozen=True, slots=True)
class ExportSource:
    """What an exporter exports: a stored run and what the command adds to it."""

    run: Run
    diagnosis: Diagnosis | None = None
    """The verdicts of a diagnose run (its diagnosis.json)."""
    gate: Gate | None = None
    """The regression gate against `baseline`."""
    baseline: Run | None = None
    op: str | None = None
    """The one op a single-op format writes (nccl-tests' file holds one program's results)."""


def metric_families(source: ExportSource) -> list[Family]:
    """Every metric of the source (`results.openmetrics`), whichever text format follows."""
    from commbench.results import openmetrics as om

    run = source.run
    families = [*om.run_families(run), *om.point_families(run), *om.health_families(run)]
    if source.diagnosis is not None:
        from commbench.diagnose.verdict import VERDICTS

        d = source.diagnosis
        families += om.diagnose_families(run, d.verdict, d.nodes, VERDICTS)
    if source.gate is not None and source.baseline is not None:
        from commbench.compare import Mark

        points = [p for _, comparison in source.gate for p in comparison.points]
        marks = [m.value for m in Mark]
        families += om.compare_families(run, source.baseline, points, source.gate.passed, marks)
    return families


def openmetrics(source: ExportSource) -> str:
    """The OpenMetrics text format 1.0.0 (ends with `# EOF`)."""
    from commbench.results.openmetrics import Dialect, render

    return render(metric_families(source), Dialect.openmetrics)


def prometheus(source: ExportSource) -> str:
    """Prometheus' text exposition format 0.0.4 (what node_exporter's textfile collector
    reads)."""
    from commbench.results.openmetrics import Dialect, render

    return render(metric_families(source), Dialect.prometheus)


def nccl_tests_json(source: ExportSource) -> str:
    """nccl-tests' `-J` JSON file, version 3 (`importers.nccl_tests.to_nccl_tests_json`): what
    its `tools/analyze_perf_json.py` reads, and `import nccl-tests` reads back."""
    from commbench.importers.nccl_tests import to_nccl_tests_json

    return to_nccl_tests_json(source.run, op=source.op)


def one_op_formats() -> list[str]:
    """The formats `--op` chooses the op of."""
    return [f for f in names(Writes.EXPORT) if FORMATS[f].one_op]


def export(source: ExportSource, fmt: str) -> str:
    return write(Writes.EXPORT, fmt, source)  # type: ignore[no-any-return]


def export_request(request: ExportRequest, judge: Callable[[Path, Path, bool], Gate]) -> str:
    """`export_run`'s work: every refusal before anything is read, then the text, written
    atomically to `out` (into a run it read whose launcher died, it settles that run:
    `settle_written`). `judge(baseline, run, allow_mismatch)` is `compare_runs`' gate."""
    from commbench.diagnose.verdict import DIAGNOSIS_FILE, load_diagnosis
    from commbench.errors import UserError
    from commbench.files import shown
    from commbench.results.lifecycle import settle_written
    from commbench.results.record import RunKind
    from commbench.results.runs import is_suite, stored_at
    from commbench.results.runs import load_run as load_one
    from commbench.results.store import atomic_write, check_output, writing

    run_path, out, baseline = stored_at(request.run), request.out, request.baseline
    out_path = None if out is None else Path(out)
    base_path = None if baseline is None else stored_at(baseline)
    fmt = getattr(request.fmt, "value", request.fmt)
    if fmt not in names(Writes.EXPORT):
        known = ", ".join(names(Writes.EXPORT))
        raise UserError(f"--format: unknown format {fmt!r}; choose from {known}")
    for path in (run_path, base_path):
        if path is not None and is_suite(path):
            raise UserError(f"{shown(path)}: a suite directory; export one of its runs")
    if out_path is not None:
        check_output([out_path], [run_path] if base_path is None else [run_path, base_path])
        out_path = _regular_file(out_path)
    if request.op is not None and not request.op.strip():
        raise UserError("--op is empty: name the op to write")
    written = FORMATS[fmt]
    if base_path is not None and written.no_gate is not None:
        raise UserError(
            f"--baseline adds the regression gate to the metrics; {written.no_gate} has no "
            "place for it"
        )
    # a node that did not run global rank 0 holds no rows: it would publish an empty run
    run = load_one(run_path).held_here()
    diagnosis = None
    if run.kind is RunKind.DIAGNOSE and (run.path / DIAGNOSIS_FILE).exists():
        diagnosis = load_diagnosis(run.path)
    gate = base = None
    if base_path is not None:
        base = load_one(base_path)
        gate = judge(base_path, run_path, request.allow_mismatch)
    if request.op is not None and not written.one_op:
        chosen = ", ".join(one_op_formats())
        raise UserError(f"--op chooses the op of --format {chosen}; the others hold every op")
    source = ExportSource(run, diagnosis=diagnosis, gate=gate, baseline=base, op=request.op)
    text = export(source, fmt)
    if out_path is not None:
        with writing(out_path):
            out_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out_path, text)
        settle_written([out_path], [p for p in (run_path, base_path) if p], "commbench export")
    return text


def _regular_file(out: Path) -> Path:
    """Where `--out` is replaced atomically: the file a symlink names (the link stays), and
    nothing but a regular file (a rename would put the file in place of a FIFO or device)."""
    import os
    import stat

    from commbench.errors import UserError
    from commbench.files import shown

    real = Path(os.path.realpath(out))
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return real  # nothing there yet, or the write says why it cannot be
    if not stat.S_ISREG(mode):
        raise UserError(f"--out {shown(out)}: not a regular file (it is replaced by a rename)")
    return real
