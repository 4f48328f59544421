"""docs/collectives.md's op table, written from the ops' declarations (`commbench.ops.OPS`):
each op's torch call and busbw factor are fields of its `OpSpec`, so a new op appears in the
docs by `make docs`, and nobody keeps a second list by hand. tests/test_ops_declaration.py fails
while the table in the file is not this one.

`python -m commbench.collectives.table docs/collectives.md` rewrites the table between its
markers; without a path it prints the table.
"""

from __future__ import annotations

import sys
from pathlib import Path

from commbench.errors import UserError
from commbench.ops import OPS, OpSpec

BEGIN = (
    "<!-- op table: written by `make docs` from commbench/ops.py's OPS "
    "(python -m commbench.collectives.table); edit the OpSpec, not the table -->"
)
END = "<!-- end of op table -->"


def _factor(spec: OpSpec) -> str:
    """The busbw factor column: the declared formula, and what an op's algbw divides."""
    if spec.latency_only:
        return "latency only"
    return f"{spec.formula}, of the busiest rank's bytes" if spec.skewed else spec.formula


def op_table() -> str:
    """The op table, one row per op in `OPS`' order (`--ops all`), as Markdown."""
    lines = ["| op | torch call | busbw factor (n ranks) |", "|---|---|---|"]
    lines += [f"| {name} | {spec.call} | {_factor(spec)} |" for name, spec in OPS.items()]
    return "\n".join(lines)


def with_table(text: str, where: str) -> str:
    """`text` (a doc) with the op table between its markers replaced by `op_table()`."""
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise UserError(f"{where}: no op table markers ({BEGIN!r} ... {END!r})")
    return f"{head}{BEGIN}\n{op_table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    if not argv:
        print(op_table())
        return 0
    path = Path(argv[0])
    path.write_text(with_table(path.read_text(), str(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
