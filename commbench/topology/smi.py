"""`parse_nvidia_smi()`: a snapshot from the text `nvidia-smi topo -m` printed elsewhere.

The matrix is found by its header (the first line whose first cell is `GPU0` and whose
second is not `X`), so prompts, pasted comments and a citation line above it are skipped.
Handled: NIC rows and columns (`NIC0` with a NIC legend, or `mlx5_0` in older drivers), with
or without the `CPU Affinity`, `NUMA Affinity` and `GPU NUMA ID` columns, `N/A` cells, tab
or space separation, and the legend after the matrix. The matrix names no GPU model and no
PCIe or NVLink generation: `gpu=` names the model (its datasheet rates, from
`commbench.topology.rates.GPU_MODELS`), else peaks rest on conservative assumed rates and
the snapshot says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from commbench.errors import UserError
from commbench.topology import pairs as verdicts
from commbench.topology import rates
from commbench.topology.cpus import is_cpu_list
from commbench.topology.model import (
    MAX_GPUS,
    MAX_NVLINKS,
    PCIE_LABELS,
    UNKNOWN_LABEL,
    Gpu,
    HostInfo,
    Nic,
    NumaNode,
    Pair,
    TopologySnapshot,
    nvlink_count,
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"^GPU[0-9]+$")
_NV_ANY = re.compile(r"^NV[0-9]+$")
_NUMBER = re.compile(r"^[0-9]{1,6}$")  # NUMA node ids: ASCII, and no node has 7 digits
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
# The trailing columns nvidia-smi has printed over the years, in order.
_TRAILERS = (("CPU", "Affinity"), ("NUMA", "Affinity"), ("GPU", "NUMA", "ID"))
_SHORT_NUMA = ("NUMA",)  # some tools trim "NUMA Affinity" to "NUMA"
# Drivers before 2017 printed SOC where current ones print SYS.
_ALIASES = {"SOC": "SYS"}


@dataclass(frozen=True, kw_only=True, slots=True)
class _Affinity:
    """The columns after a row's matrix cells that commbench reads, as nvidia-smi printed
    them (which of them it prints depends on its version); None where it printed none."""

    cpus: str | None = None
    numa: str | None = None
    """`NUMA Affinity`."""
    numa_old: str | None = None
    """`NUMA`, what older drivers print instead."""
    gpu_numa_id: str | None = None

    @property
    def numa_node(self) -> int | None:
        return _int_or_none(self.numa if self.numa is not None else self.numa_old)


_AFFINITY_COLUMNS = {
    "CPU Affinity": "cpus",
    "NUMA Affinity": "numa",
    "NUMA": "numa_old",
    "GPU NUMA ID": "gpu_numa_id",
}
"""Column title -> `_Affinity` field."""


@dataclass(kw_only=True, slots=True)
class _Row:
    """One parsed matrix row."""

    line: int
    cells: list[str]
    extras: _Affinity = field(default_factory=_Affinity)


def _strip(text: str) -> list[str]:
    return [_ANSI.sub("", line).rstrip() for line in text.splitlines()]


def _starts(tokens: list[str], i: int, title: tuple[str, ...]) -> bool:
    return tuple(tokens[i : i + len(title)]) == title


def _header_columns(tokens: list[str], line: int) -> tuple[list[str], list[str]]:
    """Split header tokens into device names and trailing column titles (linear: a header of
    a million tokens is refused by the caller's bounds, not by minutes of slicing here)."""
    titles_all = (*_TRAILERS, _SHORT_NUMA)
    devices: list[str] = []
    i = 0
    while i < len(tokens) and not any(_starts(tokens, i, t) for t in titles_all):
        devices.append(tokens[i])
        i += 1
    titles: list[str] = []
    while i < len(tokens):
        title = next((t for t in titles_all if _starts(tokens, i, t)), None)
        if title is None:
            raise UserError(f"line {line}: unknown header column starting at {_short(tokens[i])}")
        titles.append(" ".join(title))
        i += len(title)
    return devices, titles


def _find_header(lines: list[str]) -> int | None:
    for n, line in enumerate(lines):
        tokens = line.split()
        if len(tokens) >= 2 and tokens[0] == "GPU0" and tokens[1] != "X":
            return n
    return None


def _cell(token: str, line: int, row: str, column: str) -> str:
    label = _ALIASES.get(token, token)
    if label in PCIE_LABELS or label in ("X", UNKNOWN_LABEL) or nvlink_count(label) > 0:
        return label
    if _NV_ANY.match(token):
        raise UserError(
            f"line {line}: {row} column {column}: {_short(token)} names more NVLinks than a "
            f"GPU pair has (at most {MAX_NVLINKS})"
        )
    raise UserError(
        f"line {line}: {row} column {column}: {_short(token)} is not a topology label "
        "(X, NV#, PIX, PXB, PHB, NODE, SYS or N/A)"
    )


def _short(token: str) -> str:
    return repr(token if len(token) <= 40 else token[:37] + "...")


def _extras(values: list[str], titles: list[str], line: int, row: str) -> _Affinity:
    if len(values) > len(titles):
        raise UserError(
            f"line {line}: {row} has {len(values) - len(titles)} more field(s) than the "
            f"header names ({_short(' '.join(values))} after the matrix cells)"
        )
    columns = dict(zip(titles, values, strict=False))
    given = {f: columns[title] for title, f in _AFFINITY_COLUMNS.items() if title in columns}
    extras = _Affinity(**given)
    if extras.cpus is not None and extras.cpus != UNKNOWN_LABEL and not is_cpu_list(extras.cpus):
        raise UserError(f"line {line}: {row} CPU Affinity: {_short(extras.cpus)} is not a CPU list")
    for title in ("NUMA Affinity", "NUMA", "GPU NUMA ID"):
        value = columns.get(title)
        if value is not None and value != UNKNOWN_LABEL and not is_cpu_list(value):
            raise UserError(f"line {line}: {row} {title}: {_short(value)} is not a NUMA node")
    return extras


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value is not None and _NUMBER.match(value) else None


IMPORTED_NAME = "unknown (imported from nvidia-smi topo -m)"


def parse_nvidia_smi(text: str, *, gpu: str | None = None) -> TopologySnapshot:
    """A snapshot from `nvidia-smi topo -m` output; UserError names the line that is wrong.

    `gpu` is the GPU model as nvidia-smi names it (`Tesla V100-SXM2-16GB`); an unknown one is
    a UserError listing the known models."""
    model = rates.gpu_model(gpu) if gpu is not None else None
    lines = _strip(text)
    start = _find_header(lines)
    if start is None:
        if any("No devices were found" in line for line in lines):
            return TopologySnapshot(
                source="nvidia-smi", nvml_error="nvidia-smi: No devices were found"
            )
        raise UserError(
            "no `nvidia-smi topo -m` matrix found: expected a header line starting with GPU0"
        )
    header_line = start + 1
    tokens = lines[start].split()
    devices, titles = _header_columns(tokens, header_line)
    gpu_cols = _gpu_columns(devices, header_line)
    rows, nic_names = _read_rows(lines, start, devices, titles)
    for name in gpu_cols:
        if name not in rows:
            raise UserError(f"row {name} is missing from the matrix (header at line {header_line})")
    named = gpu.strip() if gpu is not None and model is not None else None
    snapshot = _snapshot(devices, gpu_cols, rows, nic_names, named)
    if model is not None and model.nvlink_gen is None and any(p.nvlinks for p in snapshot.pairs):
        snapshot.warnings.append(
            f"--gpu {model.name} has no NVLink, but the matrix shows NV# pairs: their rates "
            "are assumed; is it the right model?"
        )
    return snapshot


def _gpu_columns(devices: list[str], header_line: int) -> list[str]:
    """The header's GPU columns, checked before any row is read: named GPU0, GPU1, ... in
    order, and no more GPUs or devices than a node has (a row per device and a column per
    device: the work grows with the square, so what no node has is refused first)."""
    for name in devices:
        if name.startswith("GPU") and not _GPU.match(name):
            raise UserError(
                f"line {header_line}: {_short(name)} is not a GPU column (GPU0, GPU1, ...)"
            )
    gpu_cols = [d for d in devices if _GPU.match(d)]
    if len(gpu_cols) > MAX_GPUS:
        raise UserError(
            f"line {header_line}: {len(gpu_cols)} GPUs: no node has that many (at most {MAX_GPUS})"
        )
    if len(devices) > 2 * MAX_GPUS:
        raise UserError(
            f"line {header_line}: {len(devices)} devices: no node has that many "
            f"(at most {2 * MAX_GPUS} GPUs and NICs)"
        )
    for expected, name in enumerate(gpu_cols):
        if name != f"GPU{expected}":
            raise UserError(f"line {header_line}: expected column GPU{expected}, found {name}")
    return gpu_cols


def _read_rows(
    lines: list[str], start: int, devices: list[str], titles: list[str]
) -> tuple[dict[str, _Row], dict[str, str]]:
    """The matrix rows under the header at `lines[start]`, by device, and the NIC legend
    after them (`NIC0: mlx5_0`). The matrix ends at the first blank line after a row, or at
    `Legend`; each row must name a header device, once."""
    header_line = start + 1
    column = {d: i for i, d in enumerate(devices)}
    rows: dict[str, _Row] = {}
    nic_names: dict[str, str] = {}
    in_matrix = True
    for n in range(start + 1, len(lines)):
        line_no = n + 1
        tokens = lines[n].split()
        if in_matrix:
            if not tokens and not rows:
                continue  # a blank line between header and rows
            if not tokens or tokens[0].rstrip(":") == "Legend":
                in_matrix = False
                continue
            name = tokens[0]
            if name not in column:
                raise UserError(
                    f"line {line_no}: row {name!r} is not a device named in the header "
                    f"(line {header_line})"
                )
            if name in rows:
                raise UserError(f"line {line_no}: row {name} appears twice")
            rows[name] = _matrix_row(tokens, line_no, devices, titles, own=column[name])
            continue
        legend = _NIC_LEGEND.match(lines[n])
        if legend:
            nic_names[legend.group(1)] = legend.group(2)
    return rows, nic_names


def _matrix_row(
    tokens: list[str], line_no: int, devices: list[str], titles: list[str], *, own: int
) -> _Row:
    """One matrix row (`tokens[0]` its device, `own` that device's column): a cell per
    header device, each a topology label, X on the diagonal and nowhere else, then the
    affinity columns the header names."""
    name = tokens[0]
    if len(tokens) - 1 < len(devices):
        raise UserError(
            f"line {line_no}: row {name} has {len(tokens) - 1} cells, the header "
            f"names {len(devices)} devices"
        )
    cells = [
        _cell(tok, line_no, name, col)
        for tok, col in zip(tokens[1 : len(devices) + 1], devices, strict=True)
    ]
    if cells[own] != "X":
        raise UserError(f"line {line_no}: row {name} column {name}: expected X, got {cells[own]!r}")
    for col, cell in zip(devices, cells, strict=True):
        if cell == "X" and col != name:
            raise UserError(f"line {line_no}: row {name} column {col}: X off the diagonal")
    extras = _extras(tokens[len(devices) + 1 :], titles, line_no, name)
    return _Row(line=line_no, cells=cells, extras=extras)


def _snapshot(
    devices: list[str],
    gpu_cols: list[str],
    rows: dict[str, _Row],
    nic_names: dict[str, str],
    model_name: str | None,
) -> TopologySnapshot:
    col = {d: i for i, d in enumerate(devices)}
    warnings: list[str] = []
    gpus: list[Gpu] = []
    numa: dict[int, str] = {}
    for index, name in enumerate(gpu_cols):
        extras = rows[name].extras
        cpus = extras.cpus
        node = extras.numa_node
        cpu_affinity = cpus if cpus and cpus != UNKNOWN_LABEL else None
        if node is not None and cpu_affinity:
            numa.setdefault(node, cpu_affinity)
        gpus.append(
            Gpu(
                index=index,
                name=model_name or IMPORTED_NAME,
                numa_node=node,
                gpu_numa_id=_int_or_none(extras.gpu_numa_id),
                cpu_affinity=cpu_affinity,
            )
        )
    pair_list: list[Pair] = []
    for a in gpus:
        row = rows[gpu_cols[a.index]]
        for b in gpus:
            if a.index == b.index:
                continue
            label = row.cells[col[gpu_cols[b.index]]]
            back = rows[gpu_cols[b.index]].cells[col[gpu_cols[a.index]]]
            if label != back and a.index < b.index:
                warnings.append(
                    f"GPU{a.index}->GPU{b.index} is {label} (line {row.line}) but "
                    f"GPU{b.index}->GPU{a.index} is {back} (line {rows[gpu_cols[b.index]].line})"
                )
            pair_list.append(
                verdicts.assess(
                    a,
                    b,
                    nvlinks=nvlink_count(label),
                    pcie_path=label if label in PCIE_LABELS else None,
                    label=label,
                )
            )
    nics = [
        Nic(
            name=d,
            device=nic_names.get(d, d),
            gpu_links=[rows[g].cells[col[d]] for g in gpu_cols],
        )
        for d in devices
        if not _GPU.match(d)
    ]
    if any(p.peak_assumed for p in pair_list):
        warnings.append(
            "imported matrix: GPU model, PCIe and NVLink generations are not in "
            "`nvidia-smi topo -m` output, so peaks marked * use assumed rates (PCIe "
            f"Gen{rates.PCIE_ASSUMED_GEN} x{rates.PCIE_ASSUMED_WIDTH}, the oldest NVLink "
            "generation the NV# count allows); name the model for datasheet rates: "
            'commbench topo --from-smi FILE --gpu "Tesla V100-SXM2-16GB"'
        )
    return TopologySnapshot(
        source="nvidia-smi",
        host=HostInfo(numa_nodes=[NumaNode(id=k, cpus=v) for k, v in sorted(numa.items())]),
        gpus=gpus,
        pairs=pair_list,
        nics=nics,
        warnings=warnings,
    )
