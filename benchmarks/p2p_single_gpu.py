"""commbench p2p against a bare torch copy loop, on one GPU, in one process.

The issue's goals on one H100/H200: device-to-device copies at >= 90% of what a bare
`dst.copy_(src)` loop reaches in the same run, and pinned host<->device copies at >= 85% of
the PCIe rate (Gen5 x16: 63.0 GB/s theoretical, ~55 GB/s seen on these cards).

Per round, interleaved so that drift hits both alike, for d2d, h2d and d2h:

* bare: `for _ in range(iters): dst.copy_(src, non_blocking=True)` on the current stream,
  two CUDA events around the whole loop, time per copy = total / iters;
* commbench: the loop `commbench p2p` runs (`commbench.p2p.measure.time_step`: own stream,
  per-copy events, a sync per round), the median of its samples.

Reported per kind: the median over rounds of each figure in GB/s, the median of the
per-round ratios commbench / bare, and for host copies the fraction of the GPU's PCIe rate.
`--reference DIR` also runs `commbench p2p --host --latency` into DIR (a reference run to
commit under results/).

    python benchmarks/p2p_single_gpu.py                      # 400 MB, 5 rounds, cuda:0
    python benchmarks/p2p_single_gpu.py --size 1G --rounds 9 --json out.json
    python benchmarks/p2p_single_gpu.py --reference results/reference
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

GOAL_D2D = 0.90
GOAL_HOST = 0.85


def pcie_rate(device: int) -> tuple[float, str]:
    """The GPU's PCIe rate at its max from NVML, else Gen5 x16 (what the goal names)."""
    from commbench.topology import discover, rates

    snap = discover()
    if device < len(snap.gpus):
        g = snap.gpus[device]
        gbps = rates.pcie_gbps(g.pcie_max_gen, g.pcie_max_width)
        if gbps is not None:
            return gbps, f"PCIe Gen{g.pcie_max_gen} x{g.pcie_max_width}"
    gbps = rates.pcie_gbps(5, 16)
    assert gbps is not None
    return gbps, "PCIe Gen5 x16 (assumed: NVML did not say)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="400000000", help="bytes per copy (size grammar)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--reference", type=Path, help="also run `commbench p2p` into DIR")
    args = parser.parse_args()

    import torch

    from commbench.p2p.measure import Buffers, CudaBackend, bare_copy_loop, time_step
    from commbench.p2p.plan import HOST, Copy, Step
    from commbench.sizes import parse_size

    if not torch.cuda.is_available():
        print("p2p_single_gpu: needs a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    size = parse_size(args.size)
    g = args.device
    backend = CudaBackend()
    buffers = Buffers(backend)
    copies = {"d2d": Copy(g, g), "h2d": Copy(HOST, g), "d2h": Copy(g, HOST)}
    bare: dict[str, list[float]] = {k: [] for k in copies}
    ours: dict[str, list[float]] = {k: [] for k in copies}

    def gbps(ms: float) -> float:
        return size / (ms * 1e-3) / 1e9

    for r in range(args.rounds):
        for kind, c in copies.items():
            src, dst = buffers.source(c.src, size), buffers.dest(c.dst, size, 0)
            bare[kind].append(gbps(bare_copy_loop(dst, src, args.iters)))
            step = Step(
                test="bandwidth", mode="sequential", direction="uni", size_bytes=size, copies=(c,)
            )
            timing = time_step(step, backend, buffers, warmup=args.warmup, iters=args.iters)
            if timing.checks != [True]:
                print(f"p2p_single_gpu: {kind}: wrong data after the copy", file=sys.stderr)
                return 1
            ours[kind].append(gbps(statistics.median(timing.samples_ms[0])))
        print(
            f"round {r + 1}/{args.rounds}: "
            + "  ".join(f"{k} {ours[k][-1]:.1f}/{bare[k][-1]:.1f}" for k in copies),
            file=sys.stderr,
        )

    link, link_name = pcie_rate(g)
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(g),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "size_bytes": size,
        "rounds": args.rounds,
        "iters": args.iters,
        "pcie": link_name,
        "pcie_gbps": link,
        "kinds": {},
    }
    print(f"{report['device']}, {size:,} B per copy, {args.rounds} rounds x {args.iters} copies")
    print(f"{'copy':5} {'commbench':>10} {'bare loop':>10} {'ratio':>7}  goal")
    ok = True
    for kind in copies:
        ratio = statistics.median(o / b for o, b in zip(ours[kind], bare[kind]))
        ours_gbps, bare_gbps = statistics.median(ours[kind]), statistics.median(bare[kind])
        entry: dict[str, Any] = {
            "commbench_gbps": ours_gbps,
            "bare_gbps": bare_gbps,
            "ratio": ratio,
            "commbench_per_round": ours[kind],
            "bare_per_round": bare[kind],
        }
        if kind == "d2d":
            met = ratio >= GOAL_D2D
            goal = f">= {GOAL_D2D:.0%} of the bare loop: {'met' if met else 'NOT met'}"
        else:
            entry["fraction_of_pcie"] = ours_gbps / link
            met = ours_gbps >= GOAL_HOST * link
            goal = (
                f"{ours_gbps / link:.0%} of {link_name} ({link:.1f} GB/s), "
                f">= {GOAL_HOST:.0%}: {'met' if met else 'NOT met'}"
            )
        ok &= met
        entry["goal_met"] = met
        report["kinds"][kind] = entry
        print(f"{kind:5} {ours_gbps:10.1f} {bare_gbps:10.1f} {ratio:7.1%}  {goal}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    buffers.keep_only(None)
    if args.reference:
        from commbench.p2p import P2PSettings, run_p2p

        outcome = run_p2p(
            P2PSettings(sizes=[size], host=True, latency=True, warmup=args.warmup),
            args.reference,
        )
        print(f"reference run: {outcome.status}, {len(outcome.rows)} rows in {outcome.run_dir}")
        if args.json is None:
            (outcome.run_dir / "bench_p2p_single_gpu.json").write_text(
                json.dumps(report, indent=2) + "\n"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
