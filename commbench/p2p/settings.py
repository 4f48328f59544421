"""Settings of a p2p run: what the CLI (or a suite file) asks for, before any GPU is counted.

Everything here is checked on its own; whether the GPUs named exist is checked by
`commbench.p2p.plan`, which knows how many there are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.arguments import Iterations, PathLike, PlanOnly, Request
from commbench.errors import UserError, quoted
from commbench.flags import LATENCY
from commbench.launch.request import RunDirRequest
from commbench.lists import split_list
from commbench.numbers import MAX_DIGITS, MAX_ITERATIONS, check_range, is_digits
from commbench.options import field_of, option, use
from commbench.results.schema import P2P_MODES as MODES
from commbench.sizes import check_size, parse_sizes

if TYPE_CHECKING:
    from commbench.p2p.steps import Step

DEFAULT_SIZE = 4 * 10**8
"""10**8 float32 elements, the tensor of the motivating puzzle: 400,000,000 bytes."""
LATENCY_SIZES = (4, 64, 1024, 16 * 1024, 64 * 1024)
"""Small copies for `--latency`: 4 B to 64 KiB."""
DEFAULT_ITERS = {"bandwidth": 20, "latency": 200}
"""Timed iterations per measurement when neither `iters` nor `min_time` is given."""
MIN_ITERS = 5
MAX_ITERS = 1000
DEFAULT_WARMUP = 5
"""Untimed rounds before each measurement: the settings' default and the flag's, written once."""


@dataclass(kw_only=True, slots=True)
class P2PSettings:
    """What to copy, how, and how often."""

    src: int = 0
    """The GPU that sends, as a CUDA ordinal (`cuda:N`)."""
    dsts: list[int] | None = None
    """The GPUs that receive; None means every other visible GPU."""
    pairs: list[tuple[int, int]] | None = None
    """Explicit (src, dst) pairs, grouped by src (suite files); replaces `src`/`dsts`."""
    matrix: bool = False
    """Every GPU to every other: one fan-out per source GPU."""
    sizes: list[int] = field(default_factory=lambda: [DEFAULT_SIZE])
    """Bytes per copy. A size that is a multiple of 4 is copied as float32, else as bytes."""
    modes: list[str] = field(default_factory=lambda: list(MODES))
    """`concurrent` (all copies of a fan-out at once) and/or `sequential` (one at a time)."""
    bidirectional: bool = False
    """Every measurement copies both ways at once (src->dst and dst->src)."""
    host: bool = False
    """Also pinned host->device and device->host copies for the source GPU(s)."""
    latency: bool = False
    """Also small-copy latency at `latency_sizes`."""
    latency_sizes: list[int] = field(default_factory=lambda: list(LATENCY_SIZES))
    warmup: int = DEFAULT_WARMUP
    """Untimed rounds before each measurement (the first one also enables peer access)."""
    iters: int | None = None
    """Timed rounds per measurement; None: `min_time` if given, else `DEFAULT_ITERS`."""
    min_time: float | None = None
    """Seconds of timed rounds per measurement when `iters` is None (MIN_ITERS..MAX_ITERS)."""

    def __post_init__(self) -> None:
        if not self.modes:
            raise UserError("no --mode to measure")
        for mode in self.modes:
            if mode not in MODES:
                raise UserError(f"unknown mode {mode!r}; choose concurrent, sequential or both")
        if not self.sizes:
            raise UserError("no --size to measure")
        for size in (*self.sizes, *self.latency_sizes):
            check_size(size)
        if self.src < 0:
            raise UserError(f"--src {self.src}: GPU indices start at 0")
        if self.dsts is not None:
            if not self.dsts:
                raise UserError("--dst is empty")
            seen: set[int] = set()
            for d in self.dsts:
                if d < 0:
                    raise UserError(f"--dst {d}: GPU indices start at 0")
                if d in seen:
                    raise UserError(f"--dst names GPU {d} twice")
                seen.add(d)
            if self.src in seen:
                raise UserError(f"--dst includes the source GPU {self.src}")
        if self.matrix and (self.dsts is not None or self.pairs is not None):
            raise UserError("--matrix measures every pair; it takes no --dst")
        if self.pairs is not None:
            if not self.pairs:
                raise UserError("pairs is empty")
            for s, d in self.pairs:
                if s < 0 or d < 0:
                    raise UserError(f"pair {s}->{d}: GPU indices start at 0")
                if s == d:
                    raise UserError(f"pair {s}->{d}: source and destination are the same GPU")
        check_range(self.warmup, "--warmup", 0, MAX_ITERATIONS)
        if self.iters is not None:
            check_range(self.iters, "--iters", 1, MAX_ITERATIONS)
        if self.min_time is not None and not (math.isfinite(self.min_time) and self.min_time > 0):
            raise UserError("min_time must be a positive number of seconds")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.pairs is not None:
            data["pairs"] = [list(p) for p in self.pairs]
        return data

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> P2PSettings:
        """Settings from a plain mapping (a suite file's `p2p:` section, or `to_dict()`).

        Accepted keys: every field name, plus `size`/`sizes` as a size spec string, a
        number, a list of numbers, or an object with a `cuda` spec (a suite's Sizes);
        `pairs: all` (the matrix) or a list of [src, dst]; `mode: both`.
        """
        opts = dict(options)
        known = set(cls.__dataclass_fields__)
        kw: dict[str, Any] = {}
        for key in ("size", "sizes"):
            if opts.get(key) is not None:
                kw["sizes"] = _sizes(opts.pop(key))
            opts.pop(key, None)
        mode = opts.pop("mode", None)
        if mode is not None:
            kw["modes"] = parse_modes(str(mode))
        pairs = opts.pop("pairs", None)
        if pairs == "all":
            kw["matrix"] = True
        elif pairs is not None:
            kw["pairs"] = [(int(p[0]), int(p[1])) for p in pairs]
        dsts = opts.pop("dsts", None)
        if dsts is not None:
            kw["dsts"] = [int(d) for d in dsts]
        unknown = sorted(set(opts) - known)
        if unknown:
            raise UserError(f"unknown p2p option {unknown[0]!r}")
        kw.update({k: v for k, v in opts.items() if v is not None})
        return cls(**kw)


def _sizes(value: Any) -> list[int]:
    spec = getattr(value, "cuda", value)
    if isinstance(spec, bool):
        raise UserError(f"size {spec!r} is not a size")
    if isinstance(spec, int):
        return [spec]
    if isinstance(spec, str):
        return parse_sizes(spec)
    if isinstance(spec, Sequence) and all(isinstance(v, int) for v in spec):
        return sorted(set(spec))
    raise UserError(f"size {spec!r} is not a size spec")


def parse_modes(text: str) -> list[str]:
    """`concurrent`, `sequential` or `both` (the default)."""
    value = text.strip().lower()
    if value == "both":
        return list(MODES)
    if value in MODES:
        return [value]
    raise UserError(f"--mode {text!r}: choose concurrent, sequential or both")


def _gpu(value: int | str | None) -> int:
    """`--src`: a GPU index, 0 when not given."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    if not is_digits(text) or len(text) > MAX_DIGITS:  # isdigit() takes '²'
        raise UserError(f"--src {quoted(str(value))}: expected a GPU index (0, 1, ...)")
    return int(text)


def _gpus(value: str | Sequence[int]) -> list[int]:
    if isinstance(value, str):
        return parse_gpu_list(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise UserError(f"--dst {quoted(str(value))}: expected GPU indices")
    return list(value)


def parse_gpu_list(text: str, flag: str = "--dst") -> list[int]:
    """`1,2,4` -> [1, 2, 4]; anything else is one line of UserError."""
    items = split_list(text, flag)
    out = []
    for t in items:
        if not is_digits(t) or len(t) > MAX_DIGITS:  # ASCII: isdigit() takes '²'
            raise UserError(f"{flag} {quoted(text)}: {quoted(t)} is not a GPU index")
        out.append(int(t))
    return out


@dataclass(kw_only=True)
class P2PRequest(Iterations):
    """What a user asks of `commbench p2p`, as typed: each field is declared once here and
    is the flag and the `run_p2p` keyword. `settings()` is the one place the command and
    the API fill in defaults and check the flags together."""

    src: int | str | None = option(
        metavar="GPU", type=str, help="Source GPU (CUDA ordinal). Default 0."
    )
    dst: str | Sequence[int] | None = option(
        type=str, help="Destination GPUs, e.g. 1,2,4. Default: every other GPU."
    )
    size: str | int | Sequence[int] | None = option(
        type=str,
        help="Bytes per copy: 64M, 1G, 1M,64M, ... (binary units: 400M is 400 MiB). "
        f"Default {DEFAULT_SIZE} B: 10**8 float32.",
    )
    mode: str = option(
        default="both",
        metavar="concurrent|sequential|both",
        help="concurrent (all copies at once), sequential (one at a time) or both.",
    )
    bidirectional: bool = option(
        default=False, help="Copy both ways at once; report each way and the sum."
    )
    matrix: bool = option(
        default=False, help="Every GPU to every other; also writes a heatmap PNG."
    )
    host: bool = option(default=False, help="Also pinned host->device and device->host copies.")
    latency: bool = field_of(
        LATENCY, default=False, type=bool, help="Also small-copy latency (4 B - 64 KiB, in us)."
    )
    warmup: int = use(default=DEFAULT_WARMUP, help="Untimed rounds before each measurement.")
    iters = use(
        help="Timed rounds per measurement. "
        f"Default {DEFAULT_ITERS['bandwidth']} (latency: {DEFAULT_ITERS['latency']}).",
    )

    def settings(self) -> P2PSettings:
        if self.matrix and self.src is not None:
            raise UserError("--matrix measures every pair; it takes no --src")
        return P2PSettings(
            src=_gpu(self.src),
            dsts=None if self.dst is None else _gpus(self.dst),
            matrix=self.matrix,
            sizes=[DEFAULT_SIZE] if self.size is None else _sizes(self.size),
            modes=parse_modes(self.mode),
            bidirectional=self.bidirectional,
            host=self.host,
            latency=self.latency,
            warmup=self.warmup,
            iters=self.iters,
        )


@dataclass(kw_only=True)
class P2PRun(RunDirRequest, P2PRequest, PlanOnly, Request):
    """Every option of `commbench p2p` and `run_p2p`, declared once."""

    topology: PathLike | None = option(
        metavar="SNAPSHOT.json",
        type=Path,
        help="Explain with this snapshot (`commbench topo --format json`), not NVML's.",
    )
    dry_run = use(help="Print what each copy should reach; touch no GPU.")
    on_step: Callable[[int, int, Step], None] | None = None
    """Called as copies are measured: `(done, total, step)` (API only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.settings()  # every flag refused as it enters, before any GPU is looked for
