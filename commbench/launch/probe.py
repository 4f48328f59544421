"""The probe process: ask the installed torch what it can run, before launching anything.

Some combinations fail on one rank only (AVG on an integer dtype raises in gloo's type
dispatch) and would leave the other ranks waiting in the collective. Rather than keep a
table of what each backend version supports, run every requested op once, at world size 1,
in a throw-away process (the launcher itself never imports torch or touches a GPU).

Every requested entry of the registry runs once on a 4-element buffer, through the same
protocol calls the worker makes, so a new op or strategy is probed without a change here.

Protocol: settings JSON on stdin; one JSON object on stdout. `--memory 0,1,...` instead
reports only those GPUs' free and total memory (what changes between runs, never cached).
`commbench.launch.preflight` starts this process and reads (and caches) its answers.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def probe(settings_dict: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from commbench.collectives.ops import TORCH_DTYPES, Group
    from commbench.collectives.registry import selected
    from commbench.collectives.settings import CollectivesSettings, forms
    from commbench.launch.preflight import buffer_gpus

    s = CollectivesSettings.from_dict(settings_dict)
    result: dict[str, Any] = {"ok": True, "torch": torch.__version__, "device_count": 0}
    if s.placement.device == "cuda":
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
    if not available.get(s.placement.backend, False):
        return {"ok": False, "error": f"this torch build has no {s.placement.backend} backend"}
    dist.init_process_group(s.placement.backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        group = Group(handle=None, ranks=[0], rank=0)
        for name in s.dtypes or [s.dtype]:
            dtype = TORCH_DTYPES[name]
            for entry in selected(s.ops, s.strategies):
                spec = entry.spec
                if spec.latency_only or spec.too_few_ranks(1):
                    continue  # nothing in it depends on the dtype, or it cannot run here
                reduce_ops = (s.reduce_ops or [s.reduce_op]) if spec.reduces else [s.reduce_op]
                for reduce_op in reduce_ops:
                    for in_place in forms(spec.op, s.in_place) if not spec.strategy else [True]:
                        try:
                            bufs = entry.buffers(4, dtype, device, group, in_place)
                            entry.call(bufs, group, reduce_op, s.async_op)()
                        except Exception as exc:  # the message is what the user needs
                            text = str(exc).strip()
                            first = text.splitlines()[0] if text else type(exc).__name__
                            what = f"{spec.title} with dtype {name}"
                            if spec.reduces:
                                what += f" and reduce op {reduce_op}"
                            error = f"{s.placement.backend} cannot run {what}: {first}"
                            return {"ok": False, "error": error}
        if s.placement.device == "cuda":
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
