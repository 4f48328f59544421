"""The history's tables, versioned: `meta` holds `schema_version`, and `MIGRATIONS` takes a
database from any older version to this one, step by step, inside the writer's transaction.

A database of a newer version than this commbench knows is refused before anything is read
or written (an old commbench never misreads, or half-migrates, a newer history); an older one
is migrated by the next `history add`, and read by nothing until then.

The tables (one SQL for SQLite and PostgreSQL, `db.IDS` the one difference):

- `machines`: a machine's identity (`identity.Machine`): run family, backend, device, GPU
  models, topology hash, hosts, world size;
- `runs`: each run added, once (`digest` is unique): its id, directory, kind, time, machine,
  label (its commit), software and communication settings (JSON text);
- `series`: a point key on a machine (`identity.series_digest`);
- `points`: a run's figures at a series: the median time and busbw from the samples, n,
  the quartiles, and `value` (higher is better: busbw, else 1e6 / time), the series' values;
- `changes`: each series' change points (`changes.Change`), kept so that adding a run
  recomputes only the tail (`changes.update`).
"""

from __future__ import annotations

from commbench.errors import UserError
from commbench.history.db import IDS, POSTGRES, Database
from commbench.version import VERSION

SCHEMA_VERSION = 1

_V1 = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE machines (id {id}, digest TEXT NOT NULL UNIQUE, family TEXT NOT NULL, "
    "backend TEXT, device TEXT, gpus TEXT NOT NULL, topology TEXT, hosts TEXT NOT NULL, "
    "world_size BIGINT, label TEXT NOT NULL)",
    "CREATE TABLE runs (id {id}, digest TEXT NOT NULL UNIQUE, run_id TEXT NOT NULL, "
    "path TEXT NOT NULL, kind TEXT NOT NULL, machine BIGINT NOT NULL REFERENCES machines (id), "
    "at TEXT NOT NULL, added_at TEXT NOT NULL, label TEXT, label_from TEXT, "
    "software TEXT NOT NULL, env TEXT NOT NULL, points BIGINT NOT NULL)",
    "CREATE INDEX runs_by_run_id ON runs (run_id)",
    "CREATE TABLE series (id {id}, digest TEXT NOT NULL UNIQUE, "
    "machine BIGINT NOT NULL REFERENCES machines (id), op TEXT NOT NULL, "
    "strategy TEXT NOT NULL, dtype TEXT NOT NULL, reduce_op TEXT NOT NULL, "
    "world_size BIGINT NOT NULL, size_bytes BIGINT NOT NULL, in_place INTEGER NOT NULL, "
    "skew TEXT NOT NULL, label TEXT NOT NULL)",
    "CREATE TABLE points (series BIGINT NOT NULL REFERENCES series (id), "
    "run BIGINT NOT NULL REFERENCES runs (id), at TEXT NOT NULL, "
    "median_us DOUBLE PRECISION NOT NULL, busbw_gbps DOUBLE PRECISION, n BIGINT NOT NULL, "
    "q1_us DOUBLE PRECISION, q3_us DOUBLE PRECISION, value DOUBLE PRECISION NOT NULL, "
    "PRIMARY KEY (series, run))",
    # a series' values in order, read from the index alone (adding a run reads them all)
    "CREATE INDEX points_in_order ON points (series, at, run, value)",
    "CREATE INDEX points_of_run ON points (run)",
    "CREATE TABLE changes (series BIGINT NOT NULL REFERENCES series (id), "
    "position BIGINT NOT NULL, run BIGINT NOT NULL REFERENCES runs (id), "
    "before_value DOUBLE PRECISION NOT NULL, after_value DOUBLE PRECISION NOT NULL, "
    "ratio DOUBLE PRECISION NOT NULL, ratio_low DOUBLE PRECISION NOT NULL, "
    "ratio_high DOUBLE PRECISION NOT NULL, p_value DOUBLE PRECISION NOT NULL, "
    "PRIMARY KEY (series, position))",
)

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = ((1, _V1),)
"""(version, its statements), in order: a database at version v runs those above v."""

TABLES = ("meta", "machines", "runs", "series", "points", "changes")


def version(db: Database, *, write: bool, new: bool = False) -> int:
    """The database's schema version; 0 for one without the history's tables yet, which a
    writer makes: a PostgreSQL database, or a SQLite file being made (`new`; an existing
    SQLite file without them, even an empty one, is not a history). UserError for a database
    that is not a history, or one newer than this commbench."""
    tables = db.tables()
    if "meta" not in tables:
        if write and (new or db.dialect == POSTGRES) and not tables & set(TABLES):
            return 0
        raise UserError(f"{db.where.shown}: not a commbench history (it has no meta table)")
    row = db.one("SELECT value FROM meta WHERE key = 'schema_version'")
    if row is None or not str(row[0]).isdigit():
        raise UserError(f"{db.where.shown}: not a commbench history (no schema_version in meta)")
    found = int(row[0])
    if found > SCHEMA_VERSION:
        raise UserError(
            f"{db.where.shown}: its history schema is version {found}, newer than this "
            f"commbench's ({SCHEMA_VERSION}): upgrade commbench (version {VERSION} here)"
        )
    if found < SCHEMA_VERSION and not write:
        raise UserError(
            f"{db.where.shown}: its history schema is version {found}, older than this "
            f"commbench's ({SCHEMA_VERSION}): the next `commbench history add` migrates it"
        )
    return found


def migrate(db: Database, *, new: bool = False) -> None:
    """Bring the database to `SCHEMA_VERSION`, inside the caller's write transaction."""
    found = version(db, write=True, new=new)
    for number, statements in MIGRATIONS:
        if number > found:
            for sql in statements:
                db.run(sql.format(id=IDS[db.dialect]))
    if found == 0:
        db.run("INSERT INTO meta (key, value) VALUES ('created_by', ?)", (VERSION,))
        db.run("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    elif found < SCHEMA_VERSION:
        db.run("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))


def create(db: Database) -> None:
    """A new SQLite file's tables (in the caller's transaction)."""
    migrate(db, new=True)
