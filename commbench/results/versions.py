"""results.json of any version: `schema_version` refuses a file newer than this commbench,
and `rows_from_stored` reads the rows of whichever version wrote them, migrating version 1
(flat stats; p2p's own rows in milliseconds) into `schema.ResultRow`s as it reads them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from commbench.errors import UserError
from commbench.fields import Conv, Fields, anything, boolean, list_of, number_in, one_of
from commbench.numbers import MAX_ITERATIONS
from commbench.results.schema import (
    CHECK_SKIPPED,
    FIELD_READERS,
    MAX_TIME_US,
    P2P_NAMES,
    P2P_OP,
    P2P_READERS,
    REQUIRED,
    ROW_DTYPES,
    SCHEMA_VERSION,
    STATS_READERS,
    P2PCopy,
    ResultRow,
    check_row,
    read_fields,
)
from commbench.stats import TIMES, Stats


def schema_version(data: Mapping[str, Any], where: str) -> int:
    """The `schema_version` of a commbench file (`where` names it); UserError when it is
    missing or newer than this commbench, which would misread it."""
    match data:
        case {"schema_version": int(version)} if not isinstance(version, bool):
            pass
        case _:
            raise UserError(f"{where}: missing schema_version")
    if version < 1:
        raise UserError(f"{where}: schema_version {version} is not a version (the first is 1)")
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{where}: schema_version {version} is newer than this commbench understands "
            f"({SCHEMA_VERSION}); upgrade commbench"
        )
    return version


def rows_from_stored(
    data: Mapping[str, Any], where: str, *, kind: str | None = None, world_size: int = 1
) -> list[ResultRow]:
    """The rows of a results.json document (`data`, already parsed), whatever version wrote
    it: version 1 is migrated (flat stats; p2p's own rows in milliseconds), a newer version
    than this commbench's is refused. `where` names the file in errors (`FILE: rows[3].cv`).
    A version-1 file held p2p rows when it, or its run.json (`kind`), says `kind: p2p`; such
    rows did not store a world size and get `world_size`: the GPUs the run saw (its
    run.json's `context.device_count`)."""
    version = schema_version(data, where)
    match data:
        case {"rows": list(raw_rows)}:
            pass
        case _:
            raise UserError(f"{where}: 'rows' must be a list")
    read: Callable[[Any, str], ResultRow]
    if version >= 2:
        read = ResultRow.from_dict
    elif P2P_OP in (kind, Fields(data, where).opt("kind", anything)):
        world = max(1, world_size)

        def read(raw: Any, at: str) -> ResultRow:
            return _from_v1_p2p(raw, at, world)
    else:
        read = _from_v1
    return [read(raw, f"{where}: rows[{i}]") for i, raw in enumerate(raw_rows)]


_V1_STATS = {
    "time_us": "median",
    "min_us": "min",
    "q1_us": "q1",
    "q3_us": "q3",
    "p95_us": "p95",
    "max_us": "max",
    "mean_us": "mean",
    "stddev_us": "stddev",
    "cv": "cv",
    "n": "n",
    "outliers": "outliers",
}
"""A version-1 row's flat stats field -> its `Stats` name."""


def _from_v1(data: Any, where: str) -> ResultRow:
    """A version-1 collectives (or imported) row: the stats were fields of the row."""
    f = Fields(data, where)
    readers = {
        **FIELD_READERS,
        **{old: STATS_READERS[new] for old, new in _V1_STATS.items()},
    }
    required = REQUIRED + tuple(k for k in _V1_STATS if k not in ("outliers",))
    values = read_fields(f, readers, required)
    stats = {new: values.pop(old) for old, new in _V1_STATS.items() if old in values}
    return check_row(ResultRow(**values, stats=Stats(**stats)), f)


_ms = number_in(0, MAX_TIME_US / 1000)
_V1_P2P_READERS: dict[str, Conv[Any]] = {
    **{k: v for k, v in P2P_READERS.items() if k != "peer_access"},
    "p2p": boolean,
    "size_bytes": FIELD_READERS["size_bytes"],
    "dtype": one_of(ROW_DTYPES),
    "bw_gbps": FIELD_READERS["busbw_gbps"],
    "check": FIELD_READERS["check"],
    "time_ms": _ms,
    **{f"{name}_ms": _ms for name in TIMES if name != "median"},
    "cv": STATS_READERS["cv"],
    "n": STATS_READERS["n"],
    "outliers": STATS_READERS["outliers"],
    "warmup": FIELD_READERS["warmup"],
    "samples_ms": list_of(_ms, max_items=MAX_ITERATIONS),
}


def _from_v1_p2p(data: Any, where: str, world_size: int) -> ResultRow:
    """A version-1 p2p row (`P2PRow`: flat, milliseconds, every field optional) as a row."""
    f = Fields(data, where)
    v = {key: f.opt(key, conv) for key, conv in _V1_P2P_READERS.items()}
    given: dict[str, Any] = {k: v[k] for k in P2P_NAMES if k in v and v[k] is not None}
    copy = P2PCopy(**given, peer_access=v["p2p"])
    times = {name: v[f"{name}_ms"] for name in TIMES if name != "median"}
    times["median"] = v["time_ms"]
    stats = Stats(
        n=v["n"] or 0,
        outliers=v["outliers"] or 0,
        cv=math.nan if v["cv"] is None else v["cv"],
        **{k: math.nan if ms is None else ms * 1000 for k, ms in times.items()},
    )
    size = v["size_bytes"] or 0
    row = ResultRow(
        op=P2P_OP,
        strategy=copy.name,
        dtype=v["dtype"] or "uint8",
        world_size=world_size,
        size_bytes=size,
        count=size,
        algbw_gbps=v["bw_gbps"],
        busbw_gbps=v["bw_gbps"],
        check=v["check"] or CHECK_SKIPPED,
        stats=stats,
        warmup=v["warmup"] or 0,
        requested_bytes=size,
        samples_us=[ms * 1000 for ms in v["samples_ms"] or []],
        p2p=copy,
    )
    return check_row(row, f)
