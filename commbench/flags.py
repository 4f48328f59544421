"""The flags that more than one command takes, each declared once: its spellings and the
type it is parsed into (`commbench.options.Flag`).

A record that takes one of them says, in its own field, what the flag means for its command
(`field_of(OUT, help=...)`): help texts differ, the flag does not. The timing flags are the
fields of the groups `arguments.Iterations` and `arguments.HangTimeout` (what
`collectives.settings.Timing` holds), each command saying with `use(help=...)` what they
count for it (a point, a test, a row); `--allow-mismatch` is the gate's, wherever a baseline
is.

An option that several commands take with one meaning and one Python type is a field of one
`Group`, declared once (its type, flag, default and check: `arguments.OutDir`, ...); a
command's record inherits the group and says with `options.use(help=...)` what it means there. Two fields of one flag
that stay apart are two options: `--out` as a directory always written (`OutDir`) and as a
file instead of stdout (`OutFile`); `--label` as one name and as a list (`plot`'s).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.formats import Writes, choices, help_text
from commbench.options import flag

WARMUP = flag("--warmup", type=int)
"""Untimed iterations before the timed ones (`arguments.Iterations`, `Timing.warmup`)."""
ITERS = flag("--iters", type=int)
"""Timed iterations (`arguments.Iterations`, `Timing.iters`); None lets the command choose."""
MIN_TIME = flag("--min-time", type=float)
"""Seconds of timed iterations when `--iters` is not given (`Timing.min_time`)."""
TIMEOUT = flag("--timeout", type=float)
"""Seconds without progress before a run is declared hung (`arguments.HangTimeout`)."""
ALLOW_MISMATCH = flag("--allow-mismatch", type=bool)
"""Compare runs whose comparability context (GPU model, world size, ...) differs."""

# The flags that name what a command reads or writes, or how it prints.
OUT = flag("--out", "-o", type=Path)
"""Where a command writes: a parent directory for a new run, a file instead of stdout."""
FORMAT = flag("--format", "-f")
"""How a command prints (its choices: the formats of `formats.FORMATS` that write what it
prints, `Output`)."""
BASELINE = flag("--baseline", type=Path)
"""What a run is compared with: a run, a suite or an expectations file."""
HISTORY = flag("--history", type=str, metavar="DB")
"""A runs history (`commbench history`): a SQLite file, or a postgresql:// URL."""
TOLERANCE = flag("--tolerance", "-t", type=str)
"""How far below its baseline a measurement may fall (5%, 0.05)."""
FROM = flag("--from", type=Path)
"""A stored file to read instead of measuring (a snapshot, a run)."""
NO_PLOT = flag("--no-plot", type=bool)
DRY_RUN = flag("--dry-run", type=bool)
SIZES = flag("--sizes", "-s", type=str)
STRATEGIES = flag("--strategies", type=str)
OP = flag("--op", type=str)
LABEL = flag("--label", type=str, metavar="NAME")
"""A name a user gives what a command stores or draws (a run in a plot's legend, a run's
commit in the history)."""
WORLD = flag("--world")
BW = flag("--bw", type=float)
LATENCY = flag("--latency", type=float)
NPROC = flag("--nproc", "-n", type=int)
"""Workers per node (`collectives.placement.PlacementRequest`; a suite's override)."""
NPROC_HINT = "-n is --nproc, processes per node; nccl-tests' -n is iterations: use --iters"
"""Said where a `-n` asks for more ranks than the node has devices: nccl-tests users type
`-n 20` for 20 iterations, and would get 20 processes."""
BACKEND = flag("--backend", type=str, metavar="nccl|gloo")
DEVICE = flag("--device", type=str, metavar="cuda|cpu")


@dataclass(frozen=True, slots=True)
class Output:
    """The output option of a command that prints (`--format`, declared once as FORMAT): what
    it prints (`formats.Writes`), whose formats in the registry (`formats.FORMATS`) are its
    choices, the first its default, and the words around their list in its help.
    `options.command(record, output.parameter())` gives the body its `fmt` (a
    `formats.Choice`)."""

    writes: Writes
    lead: str = "Output format"
    """Before the list of formats (`Output format on stdout: table, csv, json or md.`)."""
    tail: str = ""
    """After it."""

    def parameter(self) -> inspect.Parameter:
        """Read off the registry now, as the command is declared: a format registered before
        gives the command one more choice."""
        formats = choices(self.writes)
        default: Any = next(iter(formats))
        return inspect.Parameter(
            "fmt",
            inspect.Parameter.KEYWORD_ONLY,
            default=FORMAT.option(default, help=help_text(self.writes, self.lead, self.tail)),
            annotation=formats,
        )
