"""`commbench export`'s formats: one interface, chosen by `--format`.

An exporter takes an `ExportSource` (the run, and what the command added to it: a diagnose
run's verdicts, the regression gate against a baseline) and returns the text. A new format
is a member of `ExportFormat` and an entry of `EXPORTS` (its writer, how `--help` names it,
what it can hold); the command, the API verb, their checks and docs/cli.md take it from
there. Light at import: `--help` reads `ExportFormat`, and the
exporters import what they need when they run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commbench.compare import Gate
    from commbench.diagnose.verdict import Diagnosis
    from commbench.results.openmetrics import Dialect, Family
    from commbench.results.runs import Run


class ExportFormat(str, Enum):
    openmetrics = "openmetrics"
    """The OpenMetrics text format 1.0.0 (ends with `# EOF`)."""
    prometheus = "prometheus"
    """Prometheus' text exposition format 0.0.4 (what node_exporter's textfile collector reads)."""
    nccl_tests_json = "nccl-tests-json"
    """nccl-tests' `-J` JSON file, version 3 (`importers.nccl_tests.to_nccl_tests_json`): what
    its `tools/analyze_perf_json.py` reads, and `import nccl-tests` reads back."""


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


Exporter = Callable[[ExportSource], str]


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


def _text_format(dialect: Dialect | str) -> Exporter:
    def exporter(source: ExportSource) -> str:
        from commbench.results.openmetrics import Dialect, render

        return render(metric_families(source), Dialect(dialect))

    return exporter


def _nccl_tests_json(source: ExportSource) -> str:
    from commbench.importers.nccl_tests import to_nccl_tests_json

    return to_nccl_tests_json(source.run, op=source.op)


@dataclass(frozen=True, slots=True)
class Export:
    """One export format: its writer, and what the command says and checks of it."""

    write: Exporter
    says: str
    """What `--format`'s help says of it, in parentheses after its name."""
    no_gate: str | None = None
    """The name of a format with no place for the regression gate (`--baseline` is refused);
    None: it holds the gate's metrics."""
    one_op: bool = False
    """It holds one op's results, which `--op` chooses (the others hold every op)."""


EXPORTS: dict[ExportFormat, Export] = {
    ExportFormat.openmetrics: Export(_text_format("openmetrics"), "text format 1.0.0"),
    ExportFormat.prometheus: Export(_text_format("prometheus"), "text format 0.0.4"),
    ExportFormat.nccl_tests_json: Export(
        _nccl_tests_json,
        "nccl-tests' -J file, version 3",
        no_gate="nccl-tests' JSON",
        one_op=True,
    ),
}
"""The registry of export formats: the one place a format is added."""

EXPORTERS: dict[ExportFormat, Exporter] = {f: e.write for f, e in EXPORTS.items()}


def formats_help() -> str:
    """`--format`'s help, from the registry: each format and what it is."""
    named = [f"{f.value} ({e.says})" for f, e in EXPORTS.items()]
    return f"{', '.join(named[:-1])} or {named[-1]}." if len(named) > 1 else f"{named[0]}."


def one_op_formats() -> list[str]:
    """The formats `--op` chooses the op of."""
    return [f.value for f, e in EXPORTS.items() if e.one_op]


def export(source: ExportSource, fmt: ExportFormat | str) -> str:
    return EXPORTERS[ExportFormat(fmt)](source)
