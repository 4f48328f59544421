"""Run and suite directories: their layout (`RunDir`, `SuiteDir`, the one place a file name
is spelled), creating them without ever overwriting one, and writing files atomically.

```
<out>/20240611-090000-collectives/     a run directory (`RunDir`)
  run.json        the record (`RunRecord`: kind, status, settings, context)
  results.json    the rows with their per-iteration samples
  results.csv     the rows for people and pandas
  settings.json   what the workers read (collectives)
  plots/          `commbench plot`'s figures
<out>/20240611-090000-suite-ci/        a suite directory (`SuiteDir`)
  suite.json      the record (`SuiteRecord`), naming a run directory per entry
  topology.json   comparison.json  comparison.md
```

The results are rewritten, via a temporary file and rename, after every measured point: a
run that dies leaves valid files with every point measured before.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from commbench.errors import UserError, quoted
from commbench.files import dump_json, path_kind, shown
from commbench.files import load_json as load_document
from commbench.results.exporters import rows_to_csv
from commbench.results.record import RunRecord, RunStatus, Silence, SuiteRecord
from commbench.results.schema import SCHEMA_VERSION, ResultRow
from commbench.results.versions import rows_from_stored, schema_version

__all__ = [
    "RESULTS_CSV",
    "RESULTS_JSON",
    "RUN_FILE",
    "RunDir",
    "SuiteDir",
    "atomic_write",
    "check_output",
    "dump_json",
    "load_json",
    "new_run_dir",
    "result_rows",
    "rows_to_csv",
    "run_dir_of",
    "run_file_in",
    "write_results",
]

RUN_FILE = "run.json"
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"
EVENTS_FILE = "events.jsonl"
"""Rank 0's journal of a launched run (`launch.protocol.Journal`)."""
SETTINGS_FILE = "settings.json"
"""What the workers of a collectives run read their settings from."""
PLOTS_DIR = "plots"
SUITE_FILE = "suite.json"
TOPOLOGY_FILE = "topology.json"
COMPARISON_JSON = "comparison.json"
COMPARISON_MD = "comparison.md"
RECORD_FILES = (RUN_FILE, RESULTS_JSON, RESULTS_CSV, EVENTS_FILE, SUITE_FILE)
"""What makes a directory a run or a suite: no command writes one of these where a user
points it (`check_output`), whichever run it belongs to."""
DOCUMENT_SUFFIXES = (".md", ".html", ".png", ".svg", ".pdf")
DOCUMENT_FILES = "_files"
"""What a command derives from a run and may write into it, then rewrite (`report -o
RUN/report.md`, its `report_files/` images): no command reads them back, so they are not the
run's to protect. A document named as an input is still protected by its identity."""
_MAX_WALKED = 100_000  # files of the inputs `check_output` looks at; a run holds dozens


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Where commbench writes what a user asked for: an OSError (no such directory, read-only,
    full disk) is that user's to fix, so it becomes one line and exit 2, naming the path."""
    try:
        yield
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def check_output(outs: Iterable[Path], reads: Iterable[Path], flag: str = "--out") -> None:
    """Refuse, before anything is written, an output path (`--out FILE`, or each file a
    command writes under `--out DIR`) that would overwrite what commbench reads: the one rule
    every command that writes a file a user named goes through (`report`, `compare`, `topo`,
    `plot`; the commands that make a new run or suite directory cannot overwrite one:
    `check_parent`, `new_run_dir`).

    Refused, with one line naming `flag`, a path that (its symlinks resolved, parents
    included):
    - is, by name or as a hard link (st_dev, st_ino), a file `reads` names, or any file of a
      run or suite directory in `reads` or holding a file it names (a suite's entries
      included, wherever they lie), except under `plots/`, where `plot` redraws its figures;
    - is named as one of `RECORD_FILES` in a run or suite directory, whichever run it is;
    - is an existing file with other hard links: writing it writes them too, and whether one
      is the record of a run elsewhere cannot be told from here.
    A directory is left to the write itself to refuse.
    """
    protected = _identities(reads)
    for out in outs:
        real = Path(os.path.realpath(out))
        try:
            info: os.stat_result | None = os.stat(real)
        except OSError:
            info = None  # nothing there yet (or the write will say why it cannot be)
        if info is not None and stat.S_ISDIR(info.st_mode):
            continue
        where = protected.get((info.st_dev, info.st_ino)) if info is not None else None
        if where is not None:
            why = f"is {where}, which this command reads"
        elif real.name in RECORD_FILES and _is_record_dir(real.parent):
            why = f"is the {real.name} of the run or suite {shown(real.parent)}"
        elif info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            why = f"is one of {info.st_nlink} hard links to one file, which would change them all"
        else:
            continue
        raise UserError(f"{flag} {shown(out)} {why}; write the output elsewhere")


def _is_record_dir(path: Path) -> bool:
    return any(os.path.isfile(path / marker) for marker in (RUN_FILE, SUITE_FILE))


def _identities(reads: Iterable[Path]) -> dict[tuple[int, int], str]:
    """(st_dev, st_ino) of every file `reads` names, and of every file of the run and suite
    directories they name or lie in (suite entries included, `plots/` left out), each with
    how a message names it."""
    found: dict[tuple[int, int], str] = {}
    walked = 0
    pending = [Path(p) for p in reads if str(p) != "-"]  # "-": stdin, no file
    seen: set[str] = set()
    while pending and walked < _MAX_WALKED:
        top = pending.pop()
        real = os.path.realpath(top)
        if real in seen:
            continue
        seen.add(real)
        if not os.path.isdir(real):
            with contextlib.suppress(OSError):
                info = os.stat(real)
                found.setdefault((info.st_dev, info.st_ino), f"the input {shown(top)}")
            if _is_record_dir(Path(real).parent):  # a run named by a file of it (run.json)
                pending.append(Path(real).parent)
            continue
        what = f"a file of {shown(top)}"
        for root, dirs, files in os.walk(real, onerror=lambda _: None):
            dirs[:] = [d for d in dirs if d != PLOTS_DIR and not d.endswith(DOCUMENT_FILES)]
            for name in files:
                walked += 1
                if name.endswith(DOCUMENT_SUFFIXES) and name not in RECORD_FILES:
                    continue  # a report written into the run is rewritten by the next one
                with contextlib.suppress(OSError):
                    info = os.stat(os.path.join(root, name))
                    if stat.S_ISREG(info.st_mode):
                        found.setdefault((info.st_dev, info.st_ino), what)
            if walked >= _MAX_WALKED:
                break
        pending += suite_entries(Path(real))
    return found


def suite_entries(path: Path) -> list[Path]:
    """The run directories a suite directory's entries name (none when it is not one, or
    its suite.json cannot be read: the command that reads it says why)."""
    if not os.path.isfile(path / SUITE_FILE):
        return []
    try:
        record = SuiteRecord.from_dict(load_json(path / SUITE_FILE, "suite file"), str(path))
    except UserError:
        return []
    return [path / e.path for e in record.entries if e.path]


def silence_of(dirs: Iterable[Path], timeout_s: float) -> Silence | None:
    """How long nothing has changed in `dirs` (a run or suite directory and its running
    entries): their own times, and those of the files and folders directly in them, where
    each rewrite through `atomic_write` lands (a heartbeat in ranks/ twice a second). None
    when none of them can be read: then nothing is concluded."""
    newest: float | None = None
    for path in dirs:
        with contextlib.suppress(OSError), os.scandir(path) as entries:
            times = [os.stat(path).st_mtime]
            for entry in itertools.islice(entries, _MAX_WALKED):
                with contextlib.suppress(OSError):
                    times.append(entry.stat(follow_symlinks=False).st_mtime)
            newest = max(times) if newest is None else max(newest, *times)
    if newest is None:
        return None
    return Silence(seconds=time.time() - newest, timeout_s=timeout_s)


def temp_name(path: Path, pid: int | None = None) -> Path:
    """The temporary file `atomic_write` writes `path` through, in the process `pid`. A name
    near the file system's 255-byte limit is cut for it (the file itself keeps its name)."""
    stem = path.name if len(path.name.encode()) <= TEMP_STEM else _cut(path.name, TEMP_STEM)
    return path.with_name(f".{stem}.{os.getpid() if pid is None else pid}.tmp")


TEMP_STEM = 200
"""Bytes of a file's name kept in its temporary name: with the dot, a pid and `.tmp`, it
stays under the 255 bytes a file name may have."""


def _cut(name: str, limit: int) -> str:
    """`name` cut to at most `limit` bytes of UTF-8, whole characters only."""
    return name.encode()[:limit].decode(errors="ignore")


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


def check_parent(out: Path, flag: str = "--out") -> None:
    """Refuse, before anything runs or is created, an `--out` that cannot hold new run
    directories: a file, a run or suite directory itself (a new run would be nested inside
    it, where no command looks for it), or a place this user cannot write."""
    shown = quoted(str(out))
    try:
        if out.exists() and not out.is_dir():
            raise UserError(f"{flag} {shown} is a file; give a directory to hold the run")
        for marker, what in ((RUN_FILE, "a run"), (SUITE_FILE, "a suite")):
            if (out / marker).is_file():
                raise UserError(
                    f"{flag} {shown} is {what} directory; give the directory that holds runs "
                    f"(e.g. {quoted(str(out.parent))})"
                )
        existing = out
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
    except OSError as exc:  # a name too long, a loop of links
        raise UserError(f"{flag} {shown}: {exc.strerror or exc}") from None
    if not existing.is_dir():
        raise UserError(f"{flag} {shown}: {quoted(str(existing))} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {shown}: cannot write under {quoted(str(existing))}")


def new_run_dir(parent: Path, kind: str) -> Path:
    """Create `parent/<timestamp>-<kind>[-N]`; an existing directory is never reused."""
    if parent.exists() and not parent.is_dir():
        raise UserError(f"cannot write under {parent}: it is a file, not a directory")
    try:
        made = new_directory(parent, f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}")
    except OSError as exc:
        raise UserError(f"cannot write {exc.filename or parent}: {exc.strerror or exc}") from None
    if made is None:
        raise UserError(f"could not create a new run directory under {parent}")
    return made


def new_directory(parent: Path, base: str) -> Path | None:
    """Create `parent/base`, or `base-2`, `base-3`... where it exists (mkdir, which fails on
    one that exists: two commands started in the same second never share one); None when a
    thousand do. The one maker of run directories and of `record`'s default trace directory;
    an OSError is its caller's to say, naming `exc.filename`."""
    parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1000):
        path = parent / (base if attempt == 0 else f"{base}-{attempt + 1}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    return None


def write_results(run_dir: Path, rows: list[ResultRow], *, p2p: bool = False) -> None:
    """results.json (every field, the samples) and results.csv (flat, `p2p`: a p2p run's
    columns even before its first row)."""
    payload = {"schema_version": SCHEMA_VERSION, "rows": [r.to_dict() for r in rows]}
    atomic_write(run_dir / RESULTS_JSON, dump_json(payload))
    atomic_write(run_dir / RESULTS_CSV, rows_to_csv(rows, p2p=p2p))


def load_json(path: Path, what: str = "run file") -> dict[str, Any]:
    """Read any commbench JSON file: UserError when missing, not a regular file, malformed,
    nested too deep, or too new."""
    data = load_document(path, what)
    if not isinstance(data, dict):
        raise UserError(f"{shown(path)}: expected a JSON object")
    schema_version(data, shown(path))
    return data


def run_file_in(path: Path) -> Path:
    """The run.json of a run directory, else `path` as given (a snapshot file, or a name the
    system refuses: its reader says so): a run directory names its run.json."""
    source = Path(path)
    with contextlib.suppress(OSError):
        if source.is_dir() and (source / RUN_FILE).is_file():
            source = source / RUN_FILE
    return source


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


class _File:
    """A file of a run or suite directory, by its fixed name: `RunDir(p).run_file` is
    `p / RUN_FILE`, the one place each directory says where its files are."""

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, directory: None, owner: type) -> _File: ...
    @overload
    def __get__(self, directory: RunDir | SuiteDir, owner: type | None = None) -> Path: ...
    def __get__(self, directory: RunDir | SuiteDir | None, owner: type | None = None) -> Any:
        return self if directory is None else directory.path / self.name


@dataclass(frozen=True, slots=True)
class RunDir:
    """A run directory: where each of its files is, and reading and writing them."""

    path: Path

    @classmethod
    def create(cls, parent: Path, kind: str) -> RunDir:
        """A new `parent/<timestamp>-<kind>[-N]` (`new_run_dir`); a suite's entry passes its
        own name (`strategies-float32`) for `kind`, so its directory says what it holds."""
        return cls(new_run_dir(parent, kind))

    @classmethod
    def of(cls, path: Path) -> RunDir:
        """The run directory `path` names (the directory or its run.json); UserError when it
        names none (`run_dir_of`)."""
        return cls(run_dir_of(path))

    @property
    def name(self) -> str:
        return self.path.name

    run_file = _File(RUN_FILE)
    results_json = _File(RESULTS_JSON)
    results_csv = _File(RESULTS_CSV)
    settings_file = _File(SETTINGS_FILE)
    plots_dir = _File(PLOTS_DIR)

    def write_record(self, record: RunRecord) -> None:
        atomic_write(self.run_file, dump_json(record.to_dict()))

    def stored_record(self) -> RunRecord:
        """run.json as it is stored, every field checked."""
        return RunRecord.from_dict(load_json(self.run_file), shown(self.run_file))

    def read_record(self, stored: RunRecord | None = None) -> RunRecord:
        """run.json, every field checked, its status as a reader must take it
        (`RunRecord.recognised`); from `stored` (`stored_record`) where it was read already."""
        record = self.stored_record() if stored is None else stored
        if record.status is not RunStatus.RUNNING:
            return record
        return record.recognised(silence_of([self.path], record.timeout_s))

    def write_rows(self, rows: list[ResultRow], *, p2p: bool = False) -> None:
        write_results(self.path, rows, p2p=p2p)

    def remove_rows(self) -> None:
        """No result files (a node of a multi-node run whose rows another node holds)."""
        for path in (self.results_json, self.results_csv):
            with writing(path):
                path.unlink(missing_ok=True)

    def read_rows(self, *, kind: str | None = None, world_size: int = 1) -> list[ResultRow]:
        """results.json's rows, each checked, version 1 migrated (`result_rows`); [] when
        there is none."""
        return result_rows(self.path, kind=kind, world_size=world_size)

    def write_settings(self, settings: dict[str, Any]) -> None:
        atomic_write(self.settings_file, dump_json(settings))


@dataclass(frozen=True, slots=True)
class SuiteDir:
    """A suite directory: suite.json, the suite's own files, and a run directory per entry."""

    path: Path

    @classmethod
    def create(cls, parent: Path, name: str) -> SuiteDir:
        return cls(new_run_dir(parent, f"suite-{name}"))

    @staticmethod
    def holds(path: Path) -> bool:
        """Whether `path` is a suite directory (a FIFO or a name the OS refuses: UserError)."""
        path = Path(path)
        return path_kind(path, "run or suite directory") == "dir" and (
            path_kind(path / SUITE_FILE, SUITE_FILE) == "file"
        )

    suite_file = _File(SUITE_FILE)
    topology_file = _File(TOPOLOGY_FILE)
    comparison_json = _File(COMPARISON_JSON)
    comparison_md = _File(COMPARISON_MD)

    def entry(self, relative: str) -> RunDir:
        """The run directory of an entry (its path in suite.json is relative to the suite)."""
        return RunDir(self.path / relative)

    def write_record(self, record: SuiteRecord) -> None:
        atomic_write(self.suite_file, dump_json(record.to_dict()))

    def read_record(self) -> SuiteRecord:
        """suite.json, every field checked, its status as a reader must take it."""
        record = SuiteRecord.from_dict(
            load_json(self.suite_file, "suite file"), shown(self.suite_file)
        )
        if record.status is not RunStatus.RUNNING:
            return record
        running = [
            self.path / e.path for e in record.entries if e.path and e.status is RunStatus.RUNNING
        ]
        return record.recognised(silence_of([self.path, *running], record.timeout_s))
