"""What a diagnosis concludes, as RUN_DIR/diagnosis.json holds it: each node's verdict with
its evidence, the stages run, and the run's status. Written by `run`, shown by `render`,
read back by `load_diagnosis`, each through these records (never a dict picked apart). The
reader takes every text as the writer wrote it (a host, a failure's words).

At the bottom of the package: it imports no other room of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.errors import UserError, interrupted_exit_code
from commbench.fields import Fields, integer_in, list_of, one_of, pick, string
from commbench.files import load_json, shown
from commbench.health.findings import Finding, FindingKind
from commbench.results.record import RunStatus

DIAGNOSIS_FILE = "diagnosis.json"
DIAGNOSIS_SCHEMA = 1
HEALTHY, DEGRADED, FAILED = "healthy", "degraded", "failed"
VERDICTS = (HEALTHY, DEGRADED, FAILED)

_MANY = 1 << 20
"""Items of a list a diagnosis writes (nodes, lines of evidence): far past any cluster."""
_count = integer_in(0, 1 << 40)


@dataclass(slots=True)
class Suspect:
    """A GPU (or GPU pair) a node's evidence names, with the lines that name it."""

    unit: str
    """As a person reads it: `node-a GPU 3`."""
    evidence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "evidence": self.evidence}

    @classmethod
    def from_dict(cls, f: Fields) -> Suspect:
        return cls(
            unit=f.req("unit", string),
            evidence=f.req("evidence", list_of(string, max_items=_MANY)),
        )


@dataclass(slots=True)
class NodeVerdict:
    host: str
    node: int
    verdict: str = HEALTHY
    evidence: list[str] = field(default_factory=list)
    gpus: list[Suspect] = field(default_factory=list)
    """GPUs (or GPU pairs) named inside the node, with their evidence."""
    health: list[Finding] = field(default_factory=list)
    """The node's link health findings (`health.findings`), when this node took them."""

    def to_dict(self) -> dict[str, Any]:
        return {
            **pick(self, "host", "node", "verdict", "evidence"),
            "gpus": [g.to_dict() for g in self.gpus],
            "health": [h.to_dict() for h in self.health],
        }

    @classmethod
    def from_dict(cls, f: Fields) -> NodeVerdict:
        return cls(
            host=f.req("host", string),
            node=f.req("node", _count),
            verdict=f.req("verdict", one_of(VERDICTS)),
            evidence=f.req("evidence", list_of(string, max_items=_MANY)),
            gpus=[Suspect.from_dict(v.obj()) for v in f.items("gpus", max_items=_MANY)],
            health=[_finding(v.obj()) for v in f.items("health", max_items=_MANY)],
        )


def _finding(f: Fields) -> Finding:
    return Finding(
        subject=f.req("subject", string),
        kind=FindingKind(f.req("kind", one_of(k.value for k in FindingKind))),
        message=f.req("message", string),
        node=f.opt("node", _count),
    )


@dataclass(slots=True)
class StageSummary:
    """How far a stage went: the rounds it planned and the tests it ran."""

    name: str
    rounds: int
    tests: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rounds": self.rounds, "tests": self.tests}

    @classmethod
    def from_dict(cls, f: Fields) -> StageSummary:
        return cls(
            name=f.req("name", string), rounds=f.req("rounds", _count), tests=f.req("tests", _count)
        )


@dataclass(slots=True)
class Diagnosis:
    """What `diagnose` concluded, as RUN_DIR/diagnosis.json holds it."""

    path: Path
    status: RunStatus
    nodes: list[NodeVerdict]
    stages: list[StageSummary]
    failure: str | None = None
    pair_gbps: dict[str, dict[tuple[int, int], float]] = field(default_factory=dict)
    """Each pair test's median bus bandwidth, by stage (for the heatmaps; not stored)."""
    notes: list[str] = field(default_factory=list)
    """What the command says on stderr beside the verdict (lines of a baseline it could not
    read); not stored."""
    stopped: bool = False
    """A stop signal came as the run was wound up: the diagnosis may be whole, but whoever
    runs more after it should stop (as `Verdict.stopped`); not stored."""

    @property
    def verdict(self) -> str:
        if any(n.verdict == FAILED for n in self.nodes) or (
            self.status is not RunStatus.COMPLETE and not self.nodes
        ):
            return FAILED
        if any(n.verdict == DEGRADED for n in self.nodes):
            return DEGRADED
        return HEALTHY if self.status is RunStatus.COMPLETE else FAILED

    @property
    def exit_code(self) -> int:
        """0 healthy, 1 not; a diagnosis a signal stopped exits as the command does for it
        (143 for a scheduler's SIGTERM, 130 for Ctrl-C), not as a failed node: a job script
        must tell a sick cluster from a preempted job."""
        if self.status is RunStatus.INTERRUPTED or self.stopped:
            return interrupted_exit_code()
        return 0 if self.verdict == HEALTHY else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": DIAGNOSIS_SCHEMA,
            "verdict": self.verdict,
            "status": self.status.value,
            "failure": self.failure,
            "nodes": [n.to_dict() for n in self.nodes],
            "stages": [s.to_dict() for s in self.stages],
        }

    @classmethod
    def from_dict(cls, data: Any, path: Path, where: str) -> Diagnosis:
        """From diagnosis.json's document; UserError naming the field that does not read,
        and for a verdict its nodes and status do not give (an edited file)."""
        f = Fields(data, where)
        version = f.req("schema_version", integer_in(1, 1 << 30))
        if version > DIAGNOSIS_SCHEMA:
            raise UserError(
                f"{f.at('schema_version')}: {version}, from a newer commbench "
                f"(this one reads {DIAGNOSIS_SCHEMA})"
            )
        diagnosis = cls(
            path=path,
            status=RunStatus(f.req("status", one_of(s.value for s in RunStatus))),
            nodes=[NodeVerdict.from_dict(v.obj()) for v in f.items("nodes", max_items=_MANY)],
            stages=[StageSummary.from_dict(v.obj()) for v in f.items("stages", max_items=_MANY)],
            failure=f.opt("failure", string),
        )
        stored = f.req("verdict", one_of(VERDICTS))
        if stored != diagnosis.verdict:
            raise UserError(
                f"{f.at('verdict')}: {stored!r}, but its nodes and status make it "
                f"{diagnosis.verdict!r}"
            )
        return diagnosis


def load_diagnosis(run_dir: Path) -> Diagnosis:
    """RUN_DIR/diagnosis.json, read back."""
    path = run_dir / DIAGNOSIS_FILE
    return Diagnosis.from_dict(load_json(path, DIAGNOSIS_FILE), run_dir, f"{shown(path)}:")
