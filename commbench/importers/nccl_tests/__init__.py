"""Read nccl-tests output (`*_perf` text, or its `-J` JSON file) into commbench result rows.

The text form is what `all_reduce_perf` and friends print. Two generations are understood:

- current: `#  Rank  0 Group  0 Pid ... device  0 [0000:07:00] NVIDIA H100 ...`, columns
  `size count type redop root time algbw busbw #wrong` (out-of-place, then in-place),
  optionally per-iteration columns (`i_min i_max i_p99 i_cv%`) and a version header;
- older: `#   Rank  0 Pid ... device  0 [0x07] Tesla V100 ...`, an `error` column (the
  largest deviation) instead of `#wrong`, and no `redop`/`root` columns for some ops.

Lines that are not nccl-tests' own (NCCL INFO/WARN debug lines, mpirun chatter, shell
prompts) are skipped; a line that starts like a result row but does not parse is an error
naming its line number, never silently dropped. Both the out-of-place and in-place columns
become rows (`in_place` false/true); `#wrong` becomes the `check` column.

The `-J` JSON file is read in its versions 1-3 (nccl-tests 2.17-2.19): with `-I 1` its
per-iteration times become the rows' samples and its per-process times the rows' `processes`
(and, one GPU per process, their per-rank times), its `config.devices` the run's ranks.
`to_nccl_tests_json` writes any collectives run back as such a file (version 3).

Its modules import one way: `model` (the typed records of a result, and what nccl-tests'
names and figures mean to commbench), `parse` (text and JSON into those records; the bounds
on an input), `write` (the records as a run directory), `export` (a run as a `-J` file).
"""

from __future__ import annotations

from commbench.importers.nccl_tests.export import to_nccl_tests_json
from commbench.importers.nccl_tests.model import (
    DTYPES,
    OP_NAMES,
    Device,
    Header,
    Parsed,
    Section,
    infer_world_size,
    nccl_version_from_code,
    op_from_text,
)
from commbench.importers.nccl_tests.parse import (
    JSON_VERSIONS,
    MAX_RANK_LINES,
    MAX_ROWS,
    parse_file,
    parse_json,
    parse_text,
)
from commbench.importers.nccl_tests.write import context_of, import_log

__all__ = [
    "DTYPES",
    "JSON_VERSIONS",
    "MAX_RANK_LINES",
    "MAX_ROWS",
    "OP_NAMES",
    "Device",
    "Header",
    "Parsed",
    "Section",
    "context_of",
    "import_log",
    "infer_world_size",
    "nccl_version_from_code",
    "op_from_text",
    "parse_file",
    "parse_json",
    "parse_text",
    "to_nccl_tests_json",
]
