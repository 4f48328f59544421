"""Run directories: creating them without ever overwriting one, and writing files atomically.

A run directory holds `run.json` (settings, context, status) and the results
(`results.csv` for people and pandas, `results.json` with the per-iteration samples). Both
are rewritten, via a temporary file and rename, after every measured point: a run that dies
leaves valid files with every point measured before.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.errors import UserError
from commbench.fields import (
    Conv,
    Fields,
    anything,
    integer_in,
    list_of,
    mapping_of,
    number_in,
    string,
)
from commbench.files import dump_json, path_kind, shown
from commbench.files import load_json as load_document
from commbench.results.exporters import dicts_to_csv, rows_to_csv
from commbench.results.record import RunStatus
from commbench.results.schema import (
    MAX_COUNT,
    MAX_WORLD_SIZE,
    SCHEMA_VERSION,
    ResultRow,
    rows_from_stored,
    schema_version,
)

__all__ = [
    "RESULTS_CSV",
    "RESULTS_JSON",
    "RUN_FILE",
    "Run",
    "atomic_write",
    "dicts_to_csv",
    "dump_json",
    "load_json",
    "load_meta",
    "load_run",
    "new_run_dir",
    "result_rows",
    "rows_to_csv",
    "run_dir_of",
    "write_results",
    "write_run_meta",
]

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


def write_results(run_dir: Path, rows: list[ResultRow], *, p2p: bool = False) -> None:
    """results.json (every field, the samples) and results.csv (flat, `p2p`: a p2p run's
    columns even before its first row)."""
    payload = {"schema_version": SCHEMA_VERSION, "rows": [r.to_dict() for r in rows]}
    atomic_write(run_dir / RESULTS_JSON, dump_json(payload))
    atomic_write(run_dir / RESULTS_CSV, rows_to_csv(rows, p2p=p2p))


STATUS_RUNNING = RunStatus.RUNNING
STATUS_INTERRUPTED = RunStatus.INTERRUPTED


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


def load_json(path: Path, what: str = "run file") -> dict[str, Any]:
    """Read any commbench JSON file: UserError when missing, not a regular file, malformed,
    nested too deep, or too new."""
    data = load_document(path, what)
    if not isinstance(data, dict):
        raise UserError(f"{shown(path)}: expected a JSON object")
    schema_version(data, shown(path))
    return data


# run.json: the fields readers (report, compare, plot, the suites) use, with their types.
# Checked in one place when the file is read, so that no reader meets a `context` that is a
# list or a `world_size` that is an object. Unknown fields are kept, unchecked.
_text = string
_texts = list_of(string)
_world = integer_in(1, MAX_WORLD_SIZE)
_RUN_FIELDS: dict[str, Conv[Any]] = {
    "kind": _text,
    "run_id": _text,
    "status": _text,
    "failure": _text,
    "note": _text,
    "source": _text,
    "format": _text,
    "imported_at": _text,
    "finished_at": _text,
    "points_total": integer_in(0, MAX_COUNT),
    "points_done": integer_in(0, MAX_COUNT),
    "steps_done": integer_in(0, MAX_COUNT),
    "duration_s": number_in(0, 1e10),
    "notes": _texts,
    "warnings": _texts,
    "suspicious": _texts,
    "settings": mapping_of(anything),
    "sections": list_of(mapping_of(anything)),
}
_CONTEXT_FIELDS: dict[str, Conv[Any]] = {
    "host": _text,
    "hosts": _texts,
    "backend": _text,
    "device": _text,
    "world_size": _world,
    "nnodes": _world,
    "device_count": integer_in(0, MAX_WORLD_SIZE),
    "device_names": _texts,
    "ranks": list_of(mapping_of(anything)),
    "nccl": _text,
    "cuda": _text,
    "torch": _text,
    "driver": _text,
    "commbench": _text,
    "command": _text,
    "started_at": _text,
    "env": mapping_of(anything),
    "topology": mapping_of(anything),
}


def check_run_meta(meta: dict[str, Any], where: str) -> None:
    """Check the fields of a run.json that readers use; UserError naming the field."""
    f = Fields(meta, f"{where}:")
    for key, conv in _RUN_FIELDS.items():
        f.opt(key, conv)
    context = f.sub("context")
    if context is None:
        return
    for key, conv in _CONTEXT_FIELDS.items():
        context.opt(key, conv)
    env = context.sub("env")
    if env is not None:
        for key in env.data:
            env.opt(key, _scalar)
    topology = context.sub("topology")
    if topology is not None:
        # what `comparable` and the report read of an embedded snapshot; the rest is shown
        # as it is. A snapshot that failed is {"error": ...}.
        topology.opt("error", _text)
        topology.opt("nvml_error", _text)
        for item in topology.items("gpus", required=False):
            item.obj()
        for item in topology.items("pairs", required=False):
            pair = item.obj()
            pair.opt("src", integer_in(0, MAX_WORLD_SIZE))
            pair.opt("dst", integer_in(0, MAX_WORLD_SIZE))
            pair.opt("link", _text)


def _scalar(value: Any, path: str) -> Any:
    if isinstance(value, dict | list):
        raise UserError(f"{path}: expected a string or a number, got a {type(value).__name__}")
    return value


def load_meta(path: Path) -> dict[str, Any]:
    """A run.json, its fields checked (`check_run_meta`), its status as a reader must take it
    (`recognise_status`)."""
    meta = load_json(path)
    check_run_meta(meta, shown(path))
    return recognise_status(meta)


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


def run_dir_of(path: Path) -> Path:
    """The run directory `path` names (the directory, or its run.json); UserError when it is
    not one, including a path the OS refuses (too long a name) or a FIFO."""
    path = Path(path)
    kind = path_kind(path, "run directory")
    if kind == "file" and path.name != RUN_FILE:
        raise UserError(
            f"{shown(path)}: not a run directory (a run is a directory holding {RUN_FILE})"
        )
    if kind == "missing":
        raise UserError(f"{shown(path)}: no such run directory")
    run_dir = path.parent if kind == "file" else path
    if path_kind(run_dir / RUN_FILE, RUN_FILE) != "file":
        raise UserError(f"{shown(path)}: not a run directory (no {RUN_FILE} in it)")
    return run_dir


def result_rows(run_dir: Path, *, kind: str | None = None, world_size: int = 1) -> list[ResultRow]:
    """The rows of a run directory's results.json, each checked, a version-1 file migrated
    (`kind`, `world_size`: from run.json, see `rows_from_stored`); [] when there is none."""
    results_path = run_dir / RESULTS_JSON
    if path_kind(results_path, "results file") == "missing":
        return []
    data = load_json(results_path, "results file")
    return rows_from_stored(data, shown(results_path), kind=kind, world_size=world_size)


def load_run(path: Path) -> Run:
    """Read a run directory (or its run.json). Raises UserError naming what is wrong."""
    run_dir = run_dir_of(path)
    meta = load_meta(run_dir / RUN_FILE)
    return Run(path=run_dir, meta=meta, rows=result_rows(run_dir))
