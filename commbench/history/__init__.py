"""The runs history: a store of runs, series and their change points (`commbench history`,
docs/history.md).

Its modules, from the bottom up (each imports only those before it):

- `changes`: change points in a series of per-run figures (ruptures' Pelt, judged by
  Mann-Whitney), whole (`detect`) or its tail only (`update`);
- `db`: one small DB-API layer over sqlite3 and psycopg (placeholders, the id column, the
  write transaction, one-line errors), so that one SQL serves SQLite and PostgreSQL;
- `schema`: the tables, versioned (`meta.schema_version`), and their ordered migrations;
- `identity`: what a run is to the history: its machine, the series of its points, the
  figures kept of each point, its label (the commit), its software, its content digest;
- `reference`: a run's comparable history, what the gate judges it against;
- `store`: `History`, runs added once with their series' change points kept up to date, and
  everything read back;
- `render`, `plot`: the reads as documents (every `--format`) and as figures;
- `request`: the commands' request records and the work of each verb.

Nothing here imports sqlite3, psycopg, numpy or matplotlib at module level: `commbench --help`
reads `request`'s records.
"""
