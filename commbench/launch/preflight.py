"""What is refused before a launch: settings the installed torch cannot run (probed in a
throw-away process, cached), ranks outside the world, more than the node can hold.

Every check here runs before a run directory exists, so bad input leaves nothing behind.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.collectives.settings import CollectivesSettings
from commbench.collectives.specs import DTYPES, OPS, plan_size
from commbench.errors import UserError
from commbench.files import dump_json, load_json, parse_json
from commbench.gpu_memory import COLLECTIVES_RESERVE, COLLECTIVES_RESERVE_FOR, refuse_if_short
from commbench.launch.pythonpath import with_package_path
from commbench.results.store import atomic_write
from commbench.sizes import format_amount, format_size

PROBE_TIMEOUT = 120.0
MAX_DEVICES = 1 << 16
MAX_MEMORY_BYTES = 1 << 50


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    """A probe's answer (from the child, or the cache), checked. `doc` is the answer as it
    came: what the cache keeps and run.json records as `context.probe`."""

    doc: dict[str, Any]
    ok: bool
    error: str = ""
    """Why the settings cannot run (`ok` false)."""
    device_count: int = 0
    memory: dict[int, tuple[int, int]] | None = None
    """Free and total bytes per local GPU index, where they were asked for."""

    @classmethod
    def read(cls, data: Any) -> ProbeAnswer | None:
        """The answer in `data`, or None when it is not one: a cache file is ours to rebuild,
        and a child that printed something else has failed, so neither may stop the tool
        with a traceback."""
        match data:
            case {"ok": False, "error": str(error)} if isinstance(data, dict):
                return cls(doc=data, ok=False, error=error)
            case {"ok": True} if isinstance(data, dict):
                pass
            case _:
                return None
        # absent: no GPU counted (a --memory answer), no memory asked for
        given = {"device_count": 0, "memory": None, **data}
        count, memory = given["device_count"], given["memory"]
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_DEVICES:
            return None
        if memory is not None and not (
            isinstance(memory, dict) and all(_free_total(k, v) for k, v in memory.items())
        ):
            return None
        return cls(
            doc=data,
            ok=True,
            device_count=count,
            memory=None if memory is None else {int(k): (v[0], v[1]) for k, v in memory.items()},
        )


def _free_total(gpu: Any, value: Any) -> bool:
    """One entry of an answer's `memory`: "GPU index": [free bytes, total bytes]."""
    return (
        isinstance(gpu, str)
        and gpu.isascii()
        and gpu.isdigit()
        and isinstance(value, list)
        and len(value) == 2
        and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_MEMORY_BYTES
            for v in value
        )
    )


def read_cache(path: Path) -> dict[str, dict[str, Any]]:
    """The probe cache's good answers by key; {} when the file is missing or is not a cache
    (a list, a string, nested 20,000 deep, a FIFO): it is then rebuilt, never an error."""
    try:
        data = load_json(path, "probe cache")
    except UserError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        key: answer.doc
        for key, value in data.items()
        # free memory is never cached: an entry holding it was not written by us
        if (answer := ProbeAnswer.read(value)) is not None
        and answer.ok
        and "memory" not in answer.doc
    }


def _probe_cache_key(settings: CollectivesSettings) -> str:
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "?"
    fields = [
        socket.gethostname(),  # a shared $HOME across nodes with different GPUs
        torch_version,
        settings.placement.backend,
        settings.placement.device,
        ",".join(settings.dtypes or [settings.dtype]),
        ",".join(settings.reduce_ops or [settings.reduce_op]),
        ",".join(sorted(settings.ops)),
        ",".join(sorted(settings.strategies)),
        str(settings.in_place),
        str(settings.async_op),
        os.environ.get("CUDA_VISIBLE_DEVICES", "*"),
    ]
    return "|".join(fields)


def _probe_cache() -> Path:
    base = os.environ.get("COMMBENCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "commbench"
    )
    return Path(base) / "probe-v1.json"


def probe(settings: CollectivesSettings) -> dict[str, Any]:
    """Validate the settings against the installed torch in a throw-away process.

    A successful probe is cached per torch version and combination, so repeated runs (a
    suite, a CI job) pay for it once.
    """
    key = _probe_cache_key(settings)
    cache_path = _probe_cache()
    cache = read_cache(cache_path)  # a corrupt cache reads as empty and is rewritten
    result = cache.get(key)
    if result is None:
        result = _run_probe(settings)
        # free memory changes from one run to the next: never cached
        cache[key] = {k: v for k, v in result.items() if k != "memory"}
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(cache_path, dump_json(cache, indent=None))
        except (OSError, UserError):
            pass  # a read-only home only costs the next run a probe
    answer = ProbeAnswer.read(result)
    count = 0 if answer is None else answer.device_count
    if settings.placement.device == "cuda" and settings.placement.nproc > count:
        raise UserError(
            f"--nproc {settings.placement.nproc} asks for more GPUs than are visible ({count})"
        )
    if settings.placement.device == "cuda" and "memory" not in result:
        result = {**result, "memory": _query_memory(buffer_gpus(settings))}
    return result


def _query_memory(devices: list[int]) -> dict[str, Any]:
    """Free and total memory of `devices`, asked in a throw-away process (the launcher never
    touches a GPU: a CUDA context here would hold memory for the whole run)."""
    args = ["--memory", ",".join(map(str, devices))]
    answer = _probe_process(args, "", "asking the GPUs for their free memory")
    memory: dict[str, Any] = answer.doc["memory"]  # as asked, checked: what run.json keeps
    return memory


def buffer_gpus(settings: CollectivesSettings) -> list[int]:
    """Local GPU indices whose ranks hold the large buffers: every one of this node's, or with
    `--ranks` those of the members (rank r runs on local GPU r mod nproc on every node, as
    torchrun numbers ranks node after node)."""
    if settings.placement.device != "cuda":
        return []
    if settings.ranks is None:
        return list(range(settings.placement.nproc))
    return sorted({r % settings.placement.nproc for r in settings.ranks})


def _run_probe(settings: CollectivesSettings) -> dict[str, Any]:
    return _probe_process(
        [], json.dumps(settings.to_dict()), f"probing the {settings.placement.backend} backend"
    ).doc


def _probe_process(args: list[str], stdin: str, doing: str) -> ProbeAnswer:
    """Run `commbench.launch.probe` with `args`; its JSON answer, or a UserError."""
    try:
        proc = subprocess.run(
            [sys.executable, "-W", "ignore", "-m", "commbench.launch.probe", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            check=False,
            env=with_package_path(os.environ),
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"{doing} took over {PROBE_TIMEOUT:.0f} s") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"could not probe torch.distributed: {tail}")
    try:
        result = ProbeAnswer.read(parse_json(lines[-1], "the probe's answer"))
    except UserError:
        result = None
    if result is None:
        raise UserError(f"could not probe torch.distributed: unexpected answer {lines[-1][:80]!r}")
    if not result.ok:
        raise UserError(result.error)
    return result


def validate_ranks(settings: CollectivesSettings, world_size: int) -> None:
    if settings.ranks is None:
        return
    if len(set(settings.ranks)) != len(settings.ranks):
        raise UserError(f"--ranks lists a rank twice: {settings.ranks}")
    bad = [r for r in settings.ranks if not 0 <= r < world_size]
    if bad:
        raise UserError(f"--ranks: rank {bad[0]} is outside the world (0..{world_size - 1})")


# More CPU ranks per core than this time the scheduler, not the backend (and a typo like
# --nproc 100000 must not start spawning).
MAX_CPU_RANKS_PER_CORE = 8
# A rank holds about this many buffers of the largest size at once: input, output (all_to_all,
# sendrecv, the ring's scratch) and room for the check (its temporaries are chunked; see
# `commbench.gpu_memory.COLLECTIVES_RESERVE` for what else a GPU keeps).
BUFFERS_PER_RANK = 3


def rank_buffers(settings: CollectivesSettings, world: int) -> int:
    """The most bytes one rank's buffers hold at once: `BUFFERS_PER_RANK` of the largest
    size, or more where an op that takes a skew makes the busiest rank receive more than S
    (its input, the busiest output, and the check's room)."""
    largest = max(settings.sizes)
    most = BUFFERS_PER_RANK * largest
    skewed = [op for op in settings.ops if OPS[op].skewed]
    if skewed:
        group = len(settings.ranks) if settings.ranks else world
        splits = settings.splits
        for op, dtype in ((op, dtype) for op in skewed for dtype in settings.dtypes):
            plan = plan_size(op, largest, dtype, group)
            busiest = splits.busiest(plan.count, group) * DTYPES[dtype]
            most = max(most, (BUFFERS_PER_RANK - 1) * plan.size_bytes + busiest)
    return most


def check_resources(
    settings: CollectivesSettings, probe_info: dict[str, Any], world: int | None = None
) -> None:
    """Refuse, before launching, what this node cannot hold: too many ranks for its cores,
    buffers larger than its memory (host memory for CPU ranks; for GPU ranks, the free memory
    of each GPU that holds buffers, less a reserve). `world`: the job's ranks (default: this
    node's)."""
    cores = os.cpu_count() or 1
    if (
        settings.placement.device == "cpu"
        and settings.placement.nproc > MAX_CPU_RANKS_PER_CORE * cores
    ):
        raise UserError(
            f"--nproc {settings.placement.nproc} is more than {MAX_CPU_RANKS_PER_CORE} CPU ranks per core "
            f"({cores} cores here)"
        )
    per_rank = rank_buffers(settings, world or settings.placement.nproc)
    request = f"--sizes up to {format_size(max(settings.sizes))}"
    buffers = f"{BUFFERS_PER_RANK} buffers per rank"
    if per_rank > BUFFERS_PER_RANK * max(settings.sizes):
        request += f" with --skew {settings.skew}"
        buffers = f"{format_amount(per_rank)} per rank: the busiest receives the most"
    if settings.placement.device == "cuda":
        answer = ProbeAnswer.read(probe_info)
        memory = (answer.memory if answer is not None else None) or {}
        refuse_if_short(
            {gpu: per_rank for gpu in buffer_gpus(settings)},
            memory,
            COLLECTIVES_RESERVE,
            f"{request} ({buffers})",
            COLLECTIVES_RESERVE_FOR,
        )
        return
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    need = per_rank * settings.placement.nproc
    if need > have:
        raise UserError(
            f"{request} needs about {format_amount(need)} of buffers ({buffers}), more than this node's {format_amount(have)} of memory ({settings.placement.nproc} ranks)"
        )
