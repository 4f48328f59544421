"""Run directories: creating them without ever overwriting one, and writing files atomically.

A run directory holds `run.json` (settings, context, status) and the results
(`results.csv` for people and pandas, `results.json` with the per-iteration samples). Both
are rewritten, via a temporary file and rename, after every measured point: a run that dies
leaves valid files with every point measured before.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.files import read_text
from commbench.results.schema import CSV_COLUMNS, SCHEMA_VERSION, ResultRow

RUN_FILE = "run.json"
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Where commbench writes what a user asked for: an OSError (no such directory, read-only,
    full disk) is that user's to fix, so it becomes one line and exit 2, naming the path."""
    try:
        yield
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def temp_name(path: Path, pid: int | None = None) -> Path:
    """The temporary file `atomic_write` writes `path` through, in the process `pid`."""
    return path.with_name(f".{path.name}.{os.getpid() if pid is None else pid}.tmp")


def atomic_write(path: Path, data: str | bytes, *, durable: bool = True) -> None:
    """Write `data` to `path` so that readers see the old or the new file, never half of one.
    A write that fails (full disk, a signal) removes its temporary file: nothing is left that
    the writer could have cleaned. `durable=False` skips the fsync, for files rewritten twice
    a second whose loss in a crash does not matter (heartbeats)."""
    tmp = temp_name(path)
    raw = data.encode() if isinstance(data, str) else data
    with writing(path):
        created = False
        try:
            with open(tmp, "wb") as fh:
                created = True
                fh.write(raw)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if created:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _clean(value: Any) -> Any:
    """NaN is not JSON: write null instead, so any JSON reader can load our files."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def dump_json(data: Any) -> str:
    return json.dumps(_clean(data), indent=2, default=_json_default) + "\n"


def new_run_dir(parent: Path, kind: str) -> Path:
    """Create `parent/<timestamp>-<kind>[-N]`; an existing directory is never reused."""
    if parent.exists() and not parent.is_dir():
        raise UserError(f"cannot write under {parent}: it is a file, not a directory")
    with writing(parent):
        parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = f"{stamp}-{kind}"
    for attempt in range(1000):
        path = parent / (base if attempt == 0 else f"{base}-{attempt + 1}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
        return path
    raise UserError(f"could not create a new run directory under {parent}")


def dicts_to_csv(records: list[dict[str, Any]], columns: list[str]) -> str:
    """CSV with a fixed column order; None becomes an empty cell, unknown keys are dropped."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for data in records:
        writer.writerow({k: ("" if v is None else v) for k, v in data.items()})
    return buf.getvalue()


def rows_to_csv(rows: list[ResultRow]) -> str:
    return dicts_to_csv([row.to_dict(samples=False) for row in rows], CSV_COLUMNS)


def write_results(run_dir: Path, rows: list[ResultRow]) -> None:
    payload = {"schema_version": SCHEMA_VERSION, "rows": [r.to_dict() for r in rows]}
    atomic_write(run_dir / RESULTS_JSON, dump_json(payload))
    atomic_write(run_dir / RESULTS_CSV, rows_to_csv(rows))


STATUS_RUNNING = "running"
STATUS_INTERRUPTED = "interrupted"


def stamp_writer(record: dict[str, Any]) -> dict[str, Any]:
    """`record`, and while it says "running", who writes it (`procs.identity`): a writer
    killed outright (SIGKILL, OOM), or one that can no longer write (full disk, an immutable
    directory), leaves it saying "running" forever; readers then check that writer."""
    if record.get("status") != STATUS_RUNNING:
        return record
    from commbench.launch.procs import identity

    return {**record, "launcher": identity()}


def recognise_status(record: dict[str, Any]) -> dict[str, Any]:
    """`record` as a reader must take it: one saying "running" whose launcher is gone (this
    host, its pid gone or reused, or a reboot since) is interrupted; on another host whether
    it still runs cannot be told, and the failure says so. Nothing on disk changes."""
    if record.get("status") != STATUS_RUNNING:
        return record
    from commbench.launch.procs import still_running

    writer = record.get("launcher")
    running = still_running(writer)
    if running:
        return record
    if not isinstance(writer, dict):
        why = "no launcher is recorded: whether it still runs cannot be told"
        return {**record, "failure": record.get("failure") or why}
    if running is None:
        why = (
            f"its launcher (pid {writer.get('pid')}) runs on host {writer.get('host')}: "
            "whether it still runs cannot be told from here"
        )
        return {**record, "failure": why}
    why = f"its launcher (pid {writer.get('pid')}) is gone"
    return {
        **record,
        "status": STATUS_INTERRUPTED,
        "failure": why,
        "recorded_status": STATUS_RUNNING,
    }


def write_run_meta(run_dir: Path, meta: dict[str, Any]) -> None:
    record = stamp_writer({"schema_version": SCHEMA_VERSION, **meta})
    atomic_write(run_dir / RUN_FILE, dump_json(record))


def load_json(path: Path) -> dict[str, Any]:
    """Read any commbench JSON file: UserError when missing, malformed or too new."""
    text = read_text(path, "run file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    version = data.get("schema_version")
    if not isinstance(version, int):
        raise UserError(f"{path}: missing schema_version")
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{path}: schema_version {version} is newer than this commbench understands "
            f"({SCHEMA_VERSION}); upgrade commbench"
        )
    return data


@dataclass(slots=True)
class Run:
    """A stored run, as the reporting and comparing commands read it."""

    path: Path
    meta: dict[str, Any]
    rows: list[ResultRow]

    @property
    def context(self) -> dict[str, Any]:
        ctx = self.meta.get("context", {})
        return ctx if isinstance(ctx, dict) else {}

    @property
    def unfinished(self) -> str | None:
        """How the run did not finish, e.g. "was interrupted (its launcher (pid 7) is gone)";
        None when it did, or does not say (imported and older files)."""
        status = self.meta.get("status")
        if status in (None, "complete"):
            return None
        how = _UNFINISHED.get(str(status), f"is {status}")
        why = self.meta.get("failure")
        return how + (f" ({why})" if why else "")


_UNFINISHED = {"failed": "failed", "interrupted": "was interrupted", "running": "has not finished"}


def load_run(path: Path) -> Run:
    """Read a run directory (or its run.json). Raises UserError naming what is wrong."""
    path = Path(path)
    if path.is_file() and path.name != RUN_FILE:
        raise UserError(f"{path}: not a run directory (a run is a directory holding {RUN_FILE})")
    run_dir = path.parent if path.is_file() else path
    if not run_dir.is_dir():
        raise UserError(f"{path}: no such run directory")
    if not (run_dir / RUN_FILE).is_file():
        raise UserError(f"{path}: not a run directory (no {RUN_FILE} in it)")
    meta = recognise_status(load_json(run_dir / RUN_FILE))
    results_path = run_dir / RESULTS_JSON
    rows: list[ResultRow] = []
    if results_path.exists():
        data = load_json(results_path)
        raw_rows = data.get("rows")
        if not isinstance(raw_rows, list):
            raise UserError(f"{results_path}: 'rows' must be a list")
        for i, raw in enumerate(raw_rows):
            try:
                rows.append(ResultRow.from_dict(raw))
            except (TypeError, ValueError) as exc:
                raise UserError(f"{results_path}: rows[{i}]: {exc}") from None
    return Run(path=run_dir, meta=meta, rows=rows)
