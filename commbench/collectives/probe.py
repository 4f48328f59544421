"""Ask the installed torch what it can run, before launching anything.

Some combinations fail on one rank only (AVG on an integer dtype raises in gloo's type
dispatch) and would leave the other ranks waiting in the collective. Rather than keep a
table of what each backend version supports, run every requested op once, at world size 1,
in a throw-away process (the launcher itself never imports torch or touches a GPU).

Protocol: settings JSON on stdin; one JSON object on stdout. `--memory 0,1,...` instead
reports only those GPUs' free and total memory (what changes between runs, never cached).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MAX_DEVICES = 1 << 16
MAX_MEMORY_BYTES = 1 << 50


def check_answer(data: Any) -> dict[str, Any] | None:
    """A probe answer (from the child, or the cache) as the launcher reads it, or None when it
    is not one: a cache file is ours to rebuild, and a child that printed something else has
    failed, so neither may stop the tool with a traceback."""
    if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
        return None
    if not data["ok"]:
        return data if isinstance(data.get("error"), str) else None
    count = data.get("device_count", 0)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_DEVICES:
        return None
    memory = data.get("memory")
    if memory is not None and not (
        isinstance(memory, dict) and all(_free_total(k, v) for k, v in memory.items())
    ):
        return None
    return data


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
    from commbench.errors import UserError
    from commbench.files import load_json

    try:
        data = load_json(path, "probe cache")
    except UserError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        key: answer
        for key, value in data.items()
        # free memory is never cached: an entry holding it was not written by us
        if (answer := check_answer(value)) is not None and answer["ok"] and "memory" not in answer
    }


def probe(settings_dict: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from commbench.collectives import ops as collective_ops
    from commbench.collectives.settings import CollectivesSettings
    from commbench.launch.preflight import buffer_gpus

    s = CollectivesSettings.from_dict(settings_dict)
    result: dict[str, Any] = {"ok": True, "torch": torch.__version__, "device_count": 0}
    if s.device == "cuda":
        if not torch.cuda.is_available():
            hint = " (this torch is a CPU build)" if torch.version.cuda is None else ""
            return {
                "ok": False,
                "error": f"--device cuda asked for, but no CUDA GPU is visible to torch{hint}; "
                "use --device cpu --backend gloo",
            }
        result["device_count"] = torch.cuda.device_count()
        # before this process's NCCL work below takes memory of its own on GPU 0
        result["memory"] = gpu_memory([g for g in buffer_gpus(s) if g < result["device_count"]])
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    available = {"nccl": dist.is_nccl_available(), "gloo": dist.is_gloo_available()}
    if not available.get(s.backend, False):
        return {"ok": False, "error": f"this torch build has no {s.backend} backend"}
    dist.init_process_group(s.backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        group = collective_ops.Group(handle=None, ranks=[0], rank=0)
        dtype = collective_ops.TORCH_DTYPES[s.dtype]
        for op in s.ops:
            if op in ("sendrecv", "barrier"):
                continue
            bufs = collective_ops.make_buffers(op, 4, dtype, device, group, s.in_place)
            call = collective_ops.make_call(op, bufs, group, s.reduce_op, s.async_op)
            try:
                call()
            except Exception as exc:  # the message is what the user needs
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                what = f"{op} with dtype {s.dtype}"
                if op in ("all_reduce", "reduce", "reduce_scatter"):
                    what += f" and reduce op {s.reduce_op}"
                return {"ok": False, "error": f"{s.backend} cannot run {what}: {first}"}
        for strategy in s.strategies:
            from commbench.strategies import make_strategy_call

            bufs = collective_ops.make_buffers("all_reduce", 4, dtype, device, group, s.in_place)
            try:
                make_strategy_call(strategy, bufs, group, s.reduce_op)()
            except Exception as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                return {
                    "ok": False,
                    "error": f"{s.backend} cannot run the {strategy} all-reduce with dtype {s.dtype} "
                    f"and reduce op {s.reduce_op}: {first}",
                }
        if s.device == "cuda":
            torch.cuda.synchronize()
    finally:
        dist.destroy_process_group()
    return result


def gpu_memory(devices: list[int]) -> dict[str, list[int]]:
    """(free, total) bytes per GPU, keyed by ordinal (a string: this goes through JSON)."""
    import torch

    return {str(d): list(torch.cuda.mem_get_info(d)) for d in devices}


def main() -> None:
    if sys.argv[1:2] == ["--memory"]:
        try:
            devices = [int(d) for d in sys.argv[2].split(",") if d]
            mem: dict[str, Any] = {"ok": True, "memory": gpu_memory(devices)}
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}".splitlines()[0]
            mem = {"ok": False, "error": f"could not ask the GPUs for their free memory: {why}"}
        sys.stdout.write(json.dumps(mem) + "\n")
        return
    settings = json.loads(sys.stdin.read())
    try:
        out = probe(settings)
    except Exception as exc:
        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
