"""The history store: runs added once, their points in series, each series' change points kept
up to date as runs come (`History.add`), and what the commands and the gate read back.

    with History.open("results/history.db", write=True) as history:
        history.add([(run, None)])
    with History.open("results/history.db") as history:   # read-only: nothing is written
        history.runs(), history.series(), history.changes(), history.reference(run)

A series' runs are in the order of their start times (ties: the order they were added). Its
change points (`commbench.history.changes`) are stored, so that adding runs recomputes only
the tail after the last settled change (`changes.update`); a run older than the series' last
one (a backfill) has the whole series recomputed (`changes.detect`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from commbench.fields import pick
from commbench.history.changes import Change
from commbench.history.db import Database, Location, connect
from commbench.history.identity import (
    DIGEST_SHOWN,
    Machine,
    Point,
    machine_of,
    now,
    point_label,
    points_of,
    run_digest,
    run_time,
    series_digest,
    software_of,
)
from commbench.history.reference import PointKey, Reference, reference
from commbench.history.schema import TABLES, create, migrate, version
from commbench.results.runs import Run
from commbench.results.schema import KeyedPoint

R = TypeVar("R")

__all__ = [
    "Added",
    "AddedRun",
    "FoundChange",
    "History",
    "PointKey",
    "Reference",
    "Selection",
    "Series",
    "StoredRun",
    "Value",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredRun:
    """A run in the history."""

    id: str
    """Its digest's first `DIGEST_SHOWN` hex digits: the history's own name for it."""
    run_id: str
    path: str
    kind: str
    at: str
    """When it started (UTC, `2026-11-21T05:50:44.000000Z`), else when it was added."""
    label: str | None
    """The commit it measured: `--label`, the CI's variable, or the run's git commit."""
    label_from: str | None
    machine: str
    hosts: list[str]
    points: int
    software: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    pk: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Series(KeyedPoint):
    """A point key on one machine."""

    id: str
    point: str
    """`all_reduce float32 op=sum 2 ranks 1 MiB`."""
    machine: str
    skew: str
    runs: int
    busbw: bool
    """Its values are busbw (GB/s); else operations per second (1e6 / the time in µs)."""
    pk: int = 0

    @property
    def label(self) -> str:
        return f"{self.point} | {self.machine}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Value:
    """A series' point in one run."""

    run_id: str
    run: str
    at: str
    label: str | None
    median_us: float
    busbw_gbps: float | None
    n: int
    q1_us: float | None
    q3_us: float | None
    value: float


@dataclass(frozen=True, slots=True, kw_only=True)
class FoundChange(Change):
    """A change point of a series (its index, medians, ratio and p-value: `Change`), with the
    runs on either side and what differs between them."""

    series: Series
    run_id: str
    """The first run after the change."""
    run: str
    at: str
    before_run_id: str
    """The last run before it."""
    changed: dict[str, list[Any]]
    """Each field that differs between the two runs: [before, after]."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "series": self.series.label,
            "series_id": self.series.id,
            "run_id": self.run_id,
            "run": self.run,
            "at": self.at,
            "before_run_id": self.before_run_id,
            "index": self.index,
            "unit": "GB/s" if self.series.busbw else "1/s",
            "before": self.before,
            "after": self.after,
            "ratio": self.ratio,
            "ratio_low": self.ratio_low,
            "ratio_high": self.ratio_high,
            "p_value": self.p_value,
            "changed": self.changed,
        }


@dataclass(frozen=True, slots=True)
class AddedRun:
    path: Path
    run_id: str
    id: str
    points: int
    added: bool
    """False: it was there already (the same run, from this path or another)."""


@dataclass(frozen=True, slots=True)
class Added:
    """What `add` did: each run added or found there already, and the change points that
    adding them found."""

    runs: list[AddedRun]
    changes: list[FoundChange]


@dataclass(frozen=True, slots=True)
class Selection:
    """Which series a read takes: all by default."""

    ops: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()
    series: str | None = None
    """A series id, or its first digits."""

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if self.ops:
            clauses.append(f"s.op IN ({', '.join(['?'] * len(self.ops))})")
            params += list(self.ops)
        if self.sizes:
            clauses.append(f"s.size_bytes IN ({', '.join(['?'] * len(self.sizes))})")
            params += list(self.sizes)
        if self.series:
            clauses.append("s.digest LIKE ?")
            params.append(self.series.lower() + "%")
        return (" AND ".join(clauses) or "1 = 1"), params


def _as_is(value: Any) -> Any:
    return value


def _shown(digest: Any) -> str:
    return str(digest)[:DIGEST_SHOWN]


@dataclass(frozen=True, slots=True)
class _Row(Generic[R]):
    """A record read back from one SELECT: its fields in order, each from the column of its
    name in `table` unless `stored` names another, taken as the database gives it unless
    `reads` says how; so the SELECT's columns and the record built from them cannot part."""

    record: type[R]
    table: str
    stored: Mapping[str, str]
    reads: Mapping[str, Callable[[Any], Any]]
    counted: tuple[str, ...] = ()
    """Fields the SELECT counts after the columns (`read`'s `more`), not stored ones."""
    names: tuple[str, ...] = field(init=False)
    """The stored fields, in the record's order: the columns' order."""

    def __post_init__(self) -> None:
        named = fields(cast(Any, self.record))
        object.__setattr__(
            self, "names", tuple(f.name for f in named if f.name not in self.counted)
        )

    @property
    def columns(self) -> str:
        return ", ".join(self.stored.get(name, f"{self.table}.{name}") for name in self.names)

    def read(self, r: Sequence[Any], **more: Any) -> R:
        """The record of a row's first `len(names)` columns, with the fields in `more`."""
        values = zip(self.names, r[: len(self.names)], strict=True)
        return self.record(
            **{name: self.reads.get(name, _as_is)(value) for name, value in values}, **more
        )


_RUN_ROW = _Row(
    StoredRun,
    "r",
    stored={"id": "r.digest", "machine": "m.label", "hosts": "m.hosts", "pk": "r.id"},
    reads={
        "id": _shown,
        "hosts": json.loads,
        "points": int,
        "software": json.loads,
        "env": json.loads,
        "pk": int,
    },
)
_SERIES_ROW = _Row(
    Series,
    "s",
    stored={"id": "s.digest", "point": "s.label", "machine": "m.label", "pk": "s.id"},
    reads={"world_size": int, "size_bytes": int, "in_place": bool, "id": _shown, "pk": int},
    counted=("runs", "busbw"),
)
_RUN_COLUMNS = _RUN_ROW.columns
_SERIES_COLUMNS = _SERIES_ROW.columns
_SERIES_READ = len(_SERIES_ROW.names) + len(_SERIES_ROW.counted)
"""The columns `_series_of` reads: the series', then its count of runs and of busbw values."""
_CHANGE_COLUMNS = (
    "c.position, c.run, c.before_value, c.after_value, c.ratio, c.ratio_low, c.ratio_high, "
    "c.p_value"
)
"""A stored change point (`_change_of`): where it is, its first run, and its figures in the
order of `Change`'s fields."""
_CHANGE_FIELDS = tuple(f.name for f in fields(Change))
_VALUE_FIELDS = ("median_us", "busbw_gbps", "n", "q1_us", "q3_us", "value")
"""A point's figures: `Value`'s fields past the run's, each a column of `points`."""
_VALUE_COLUMNS = ", ".join(f"p.{name}" for name in _VALUE_FIELDS)


class History:
    """A history database, open for reading or writing (`open`)."""

    def __init__(self, db: Database):
        self.db = db

    @classmethod
    @contextmanager
    def open(cls, where: str | os.PathLike[str], *, write: bool = False) -> Iterator[History]:
        """The history at `where` (a SQLite path or a postgresql:// URL). Reading never
        writes, and never makes a database; a writer makes a SQLite file that is not there."""
        with connect(Location.of(where), write=write, create=create) as db:
            if not write:
                version(db, write=False)
            yield cls(db)

    # -- writing ---------------------------------------------------------------------------

    def add(self, runs: Sequence[tuple[Run, str | None, str | None]]) -> Added:
        """Add each (run, label, where the label came from), all in one transaction: either
        every new run is stored, its points and its series' change points with it, or
        nothing is. A run stored already (the same content, `run_digest`) is left as it is."""
        done: list[AddedRun] = []
        with self.db.transaction():
            migrate(self.db)
            touched: dict[int, set[int]] = {}
            for run, label, label_from in runs:
                digest = run_digest(run)
                points = points_of(run)
                shown = digest[:DIGEST_SHOWN]
                run_id = run.record.run_id or run.path.name
                if self.db.one("SELECT id FROM runs WHERE digest = ?", (digest,)) is not None:
                    done.append(AddedRun(run.path, run_id, shown, len(points), False))
                    continue
                pk, series = self._insert_run(run, digest, label, label_from, points)
                for s in series:
                    touched.setdefault(s, set()).add(pk)
                done.append(AddedRun(run.path, run_id, shown, len(points), True))
            found = [c for s, new in touched.items() for c in self._update_changes(s, new)]
        return Added(done, found)

    def _machine(self, machine: Machine) -> int:
        digest = machine.digest
        self.db.run(
            "INSERT INTO machines (digest, family, backend, device, gpus, topology, hosts, "
            "world_size, label) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (
                digest,
                machine.family,
                machine.backend,
                machine.device,
                json.dumps(list(machine.gpus)),
                machine.topology,
                json.dumps(list(machine.hosts)),
                machine.world_size,
                machine.label,
            ),
        )
        return self._id("machines", digest)

    def _id(self, table: str, digest: str) -> int:
        row = self.db.one(f"SELECT id FROM {table} WHERE digest = ?", (digest,))
        assert row is not None, (table, digest)
        return int(row[0])

    def _insert_run(
        self, run: Run, digest: str, label: str | None, label_from: str | None, points: list[Point]
    ) -> tuple[int, list[int]]:
        """The run and its points (into their series, made where new): its id, the series'."""
        machine = machine_of(run)
        machine_pk = self._machine(machine)
        at = run_time(run) or now()
        self.db.run(
            "INSERT INTO runs (digest, run_id, path, kind, machine, at, added_at, label, "
            "label_from, software, env, points) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (
                digest,
                run.record.run_id or run.path.name,
                str(run.path),
                run.kind.value,
                machine_pk,
                at,
                now(),
                label,
                label_from,
                json.dumps(software_of(run.context), sort_keys=True),
                json.dumps(run.context.env, sort_keys=True, default=str),
                len(points),
            ),
        )
        pk = self._id("runs", digest)
        rows, series = [], []
        for point in points:
            s = self._series(machine, machine_pk, point)
            series.append(s)
            rows.append(
                (
                    s,
                    pk,
                    at,
                    point.median_us,
                    point.busbw_gbps,
                    point.n,
                    point.q1_us,
                    point.q3_us,
                    point.value,
                )
            )
        self.db.many(
            "INSERT INTO points (series, run, at, median_us, busbw_gbps, n, q1_us, q3_us, value) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            rows,
        )
        return pk, series

    def _series(self, machine: Machine, machine_pk: int, point: Point) -> int:
        row = point.row
        digest = series_digest(machine, row.key)
        found = self.db.one("SELECT id FROM series WHERE digest = ?", (digest,))
        if found is not None:
            return int(found[0])
        self.db.run(
            "INSERT INTO series (digest, machine, op, strategy, dtype, reduce_op, world_size, "
            "size_bytes, in_place, skew, label) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (
                digest,
                machine_pk,
                row.op,
                row.strategy,
                row.dtype,
                row.reduce_op,
                row.world_size,
                row.size_bytes,
                int(row.in_place),
                row.skew,
                point_label(row),
            ),
        )
        return self._id("series", digest)

    def _update_changes(self, series: int, new_runs: set[int]) -> list[FoundChange]:
        """Recompute the series' change points after runs were added to it: only the tail
        (`changes.update`) when the new runs all came after its others, few enough to lie in
        the tail it looks at again, and its stored changes still stand where they were found;
        else the whole series (`changes.detect`). Returns the changes that are new (a change
        is known by its first run)."""
        from commbench.history import changes as detector

        # the values alone: a series of 10,000 runs is read at every add, its run ids only
        # where they are asked for (`run_at`)
        values = [v for (v,) in self._in_order(series, "value")]
        stored = self._stored_changes(series)
        found: list[Change] = []
        if len(values) >= detector.MIN_RUNS:
            added = len(new_runs)
            # update() looks again at the last `window` runs only: the new ones must lie well
            # inside them, with a change's `reach` of older runs before them
            last = self._in_order(series, "run", descending=True, limit=added)
            tail = added <= detector.DETECTOR.window - detector.DETECTOR.reach and all(
                r in new_runs for (r,) in last
            )
            settled = tail and all(
                c.index < len(values) - added and self._run_at(series, c.index) == run
                for c, run in stored
            )
            previous = [c for c, _ in stored]
            found = detector.update(values, previous) if settled else detector.detect(values)
        firsts = {c.index: self._run_at(series, c.index) for c in found}
        self.db.run("DELETE FROM changes WHERE series = ?", (series,))
        self.db.many(
            "INSERT INTO changes (series, position, run, before_value, after_value, ratio, "
            "ratio_low, ratio_high, p_value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    series,
                    c.index,
                    firsts[c.index],
                    c.before,
                    c.after,
                    c.ratio,
                    c.ratio_low,
                    c.ratio_high,
                    c.p_value,
                )
                for c in found
            ],
        )
        known = {run for _, run in stored}
        fresh = {c.index for c in found if firsts[c.index] not in known}
        if not fresh:
            return []
        return [c for c in self.changes(series_pk=series) if c.index in fresh]

    def _in_order(
        self, series: int, column: str, *, descending: bool = False, limit: int | None = None
    ) -> list[tuple[Any, ...]]:
        """One column of a series' points, in the order of its runs (or the reverse)."""
        way = "DESC" if descending else "ASC"
        sql = f"SELECT {column} FROM points WHERE series = ? ORDER BY at {way}, run {way}"
        if limit is None:
            return self.db.rows(sql, (series,))
        return self.db.rows(sql + " LIMIT ?", (series, limit))

    def _run_at(self, series: int, index: int) -> int:
        """The id of the series' run at `index` in its order."""
        row = self.db.one(
            "SELECT run FROM points WHERE series = ? ORDER BY at, run LIMIT 1 OFFSET ?",
            (series, index),
        )
        assert row is not None, (series, index)
        return int(row[0])

    def _stored_changes(self, series: int) -> list[tuple[Change, int]]:
        """The series' stored change points, each with the id of its first run."""
        return [
            _change_of(r)
            for r in self.db.rows(
                f"SELECT {_CHANGE_COLUMNS} FROM changes c WHERE c.series = ? ORDER BY c.position",
                (series,),
            )
        ]

    # -- reading ---------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Rows in each table (what a refused command must leave unchanged)."""
        return {t: int(self.db.rows(f"SELECT COUNT(*) FROM {t}")[0][0]) for t in TABLES}

    def runs(self, where: str = "1 = 1", params: Sequence[Any] = ()) -> list[StoredRun]:
        """The runs, oldest first."""
        found = self.db.rows(
            f"SELECT {_RUN_COLUMNS} FROM runs r JOIN machines m ON m.id = r.machine "
            f"WHERE {where} ORDER BY r.at, r.id",
            params,
        )
        return [_RUN_ROW.read(r) for r in found]

    def find_runs(self, target: str) -> list[StoredRun]:
        """The runs `target` names: by run_id, or by the first digits of their history id."""
        by_id = self.runs("r.run_id = ?", (target,))
        if by_id or not _hex(target):
            return by_id
        return self.runs("r.digest LIKE ?", (target.lower() + "%",))

    def series(self, selection: Selection = Selection(), *, pk: int | None = None) -> list[Series]:
        """The series the selection takes, by machine, op and size."""
        where, params = selection.where()
        if pk is not None:
            where, params = f"{where} AND s.id = ?", [*params, pk]
        found = self.db.rows(
            f"SELECT {_SERIES_COLUMNS}, COUNT(p.run), COUNT(p.busbw_gbps) FROM series s "
            "JOIN machines m ON m.id = s.machine LEFT JOIN points p ON p.series = s.id "
            f"WHERE {where} GROUP BY {_SERIES_COLUMNS} "
            "ORDER BY m.label, s.op, s.strategy, s.dtype, s.reduce_op, s.world_size, s.in_place, "
            "s.skew, s.size_bytes",
            params,
        )
        return [_series_of(r) for r in found]

    def values(self, series: Series) -> list[Value]:
        """A series' points, in the order of its runs."""
        found = self.db.rows(
            f"SELECT r.run_id, r.digest, p.at, r.label, {_VALUE_COLUMNS} FROM points p "
            "JOIN runs r ON r.id = p.run WHERE p.series = ? ORDER BY p.at, p.run",
            (series.pk,),
        )
        return [_value_of(r[0], r[1][:DIGEST_SHOWN], r[2], r[3], r[4:]) for r in found]

    def run_points(self, run: StoredRun) -> list[tuple[Series, Value]]:
        """A run's points, each with its series."""
        found = self.db.rows(
            f"SELECT {_SERIES_COLUMNS}, 0, 0, {_VALUE_COLUMNS} FROM points p "
            "JOIN series s ON s.id = p.series JOIN machines m ON m.id = s.machine "
            "WHERE p.run = ? "
            "ORDER BY s.op, s.strategy, s.dtype, s.reduce_op, s.in_place, s.skew, s.size_bytes",
            (run.pk,),
        )
        return [
            (
                _series_of(r[:_SERIES_READ]),
                _value_of(run.run_id, run.id, run.at, run.label, r[_SERIES_READ:]),
            )
            for r in found
        ]

    def changes(
        self, selection: Selection = Selection(), *, series_pk: int | None = None
    ) -> list[FoundChange]:
        """The change points of the series the selection takes, each with what changed."""
        where, params = selection.where()
        if series_pk is not None:
            where, params = f"{where} AND s.id = ?", [*params, series_pk]
        found = self.db.rows(
            f"SELECT c.series, {_CHANGE_COLUMNS} FROM changes c "
            f"JOIN series s ON s.id = c.series WHERE {where} ORDER BY c.series, c.position",
            params,
        )
        series_of: dict[int, Series] = {}
        out = []
        for s, *stored in found:
            if s not in series_of:
                series_of[s] = self.series(pk=s)[0]
            change, run = _change_of(stored)
            after_run = self.runs("r.id = ?", (run,))[0]
            previous = self._run_before(int(s), after_run)
            out.append(
                FoundChange(
                    **pick(change, *_CHANGE_FIELDS),
                    series=series_of[s],
                    run_id=after_run.run_id,
                    run=after_run.id,
                    at=after_run.at,
                    before_run_id=previous.run_id if previous else "",
                    changed=changed(previous, after_run) if previous else {},
                )
            )
        return sorted(out, key=lambda c: (c.at, c.series.label))

    def _run_before(self, series: int, run: StoredRun) -> StoredRun | None:
        """The series' run just before `run`."""
        row = self.db.one(
            "SELECT run FROM points WHERE series = ? AND (at < ? OR (at = ? AND run < ?)) "
            "ORDER BY at DESC, run DESC LIMIT 1",
            (series, run.at, run.at, run.pk),
        )
        return None if row is None else self.runs("r.id = ?", (row[0],))[0]

    def reference(self, run: Run, *, limit: int = 20) -> Reference:
        """The history a gate judges `run` against: for each of its point keys, the series of
        its machine; in each, the runs that started no later than `run`, after that series'
        last change point among them, the `limit` most recent; never `run` itself."""
        return reference(self.db, run, limit=limit)


def changed(before: StoredRun, after: StoredRun) -> dict[str, list[Any]]:
    """What differs between two runs: software, label, kind, hosts, each NCCL_* (and other
    communication) setting; {field: [before, after]}."""
    out: dict[str, list[Any]] = {}
    for name in ("label", "kind"):
        a, b = getattr(before, name), getattr(after, name)
        if a != b:
            out[name] = [a, b]
    for name in sorted({*before.software, *after.software}):
        a, b = before.software.get(name), after.software.get(name)
        if a != b:
            out[name] = [a, b]
    for name in sorted({*before.env, *after.env}):
        a, b = before.env.get(name), after.env.get(name)
        if a != b:
            out[f"env.{name}"] = [a, b]
    if before.hosts != after.hosts:
        out["hosts"] = [before.hosts, after.hosts]
    return out


def _hex(text: str) -> bool:
    return len(text) >= 4 and all(c in "0123456789abcdef" for c in text.lower())


def _change_of(r: Sequence[Any]) -> tuple[Change, int]:
    """A change point as `_CHANGE_COLUMNS` read it, and the id of its first run."""
    position, run, *figures = r
    return Change(index=int(position), **dict(zip(_CHANGE_FIELDS[1:], figures))), int(run)


def _value_of(run_id: str, run: str, at: str, label: str | None, r: Sequence[Any]) -> Value:
    """A series' point in the run named, from its figures as `_VALUE_COLUMNS` read them."""
    figures = dict(zip(_VALUE_FIELDS, r))
    figures["n"] = int(figures["n"])
    return Value(run_id=run_id, run=run, at=at, label=label, **figures)


def _series_of(r: Sequence[Any]) -> Series:
    """A series as `_SERIES_COLUMNS` read it, then its count of runs and of busbw values."""
    runs, busbw = r[len(_SERIES_ROW.names) : _SERIES_READ]
    return _SERIES_ROW.read(r, runs=int(runs), busbw=int(busbw) > 0)
