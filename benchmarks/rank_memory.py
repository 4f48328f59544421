"""What the rank list and the health gather cost a process at 131,072 ranks (issue 45).

Builds the records of 16,384 nodes x 8 ranks as the workers make them (`ranks.rank_record`,
host names, addresses, pids, H100 names), then runs, for the old way and the new, the code
that turns what the collective delivers into what a worker keeps and what the writer (global
rank 0) journals, under tracemalloc:

- rank list, before: `all_gather_object` delivers every rank's pickle in a buffer of the
  world x the largest pickle on every worker, and unpickles each into a dict; after: the
  world x 4 integers of `gather.gather_ranks`' sum, read into columns (`gather.read_rows`), and
  each kind's strings (`Columns.table`);
- context line: the journal's line with the list of dicts, and with the compact table;
- the launcher reading the line back into run.json's `ranks` (`ranks.context_ranks`): alike
  for both, since run.json keeps its format;
- health gather on rank 0, before: `gather_object` makes a buffer of the world x the largest
  snapshot on rank 0 and a size tensor per rank on every rank; after: `gather_sparse`'s
  buffers of at most `gather.CHUNK`, and the snapshots themselves.

Tensor memory is outside tracemalloc: its bytes are given from the buffers' shapes.

    python benchmarks/rank_memory.py                 # about 1 minute, 131,072 ranks
    python benchmarks/rank_memory.py --nodes 1024    # smaller
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import random
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from commbench.launch.gather import CHUNK, _chunks, read_rows
from commbench.launch.ranks import (
    COMPACT_KEY,
    context_ranks,
    fingerprint,
    kind_of,
    rank_record,
)

MB = 1e6


def records(nodes: int, per_node: int, seed: int = 45) -> list[dict[str, Any]]:
    """Every rank's record as the workers make them, in global rank order: pids a node's
    torchrun started one after another, now and then with a gap."""
    rng = random.Random(seed)
    out = []
    for node in range(nodes):
        pid = rng.randrange(10_000, 4_000_000)
        for local in range(per_node):
            pid += 1 if rng.random() < 0.8 else rng.randrange(2, 40)
            out.append(
                rank_record(
                    rank=len(out),
                    local_rank=local,
                    host=f"gpu-node-{node:05d}.cluster.example.com",
                    node=node,
                    pid=pid,
                    address=f"10.{node >> 8 & 255}.{node & 255}.10",  # own_address: per node
                    device=f"cuda:{local}",
                    device_name="NVIDIA H100 80GB HBM3",
                )
            )
    return out


def traced(work: Callable[[], Any]) -> tuple[Any, float, float]:
    """`work()`'s result, its peak and what stays allocated while the result is held (MB)."""
    gc.collect()
    tracemalloc.start()
    result = work()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, peak / MB, kept / MB


def health_bytes() -> int:
    """A node's first health snapshot as its local rank 0 sends it, from this machine."""
    from commbench.health.capture import take
    from commbench.launch.protocol import Health
    from commbench.launch.worker import _own_nics

    snapshot = take().to_dict()
    return len(
        Health(phase="before", node=0, host="h", snapshot=snapshot, nics=_own_nics()).to_json()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16_384)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument(
        "--snapshot-bytes",
        type=int,
        default=None,
        help="A node's health message (default: this machine's, GPUs and NICs as it has them)",
    )
    args = parser.parse_args()
    recs = records(args.nodes, args.per_node)
    world = len(recs)
    rows: list[
        tuple[str, str, float, float, float, str]
    ] = []  # what, way, peak, kept, buffer, size

    # -- the rank list on a worker -------------------------------------------------------------
    pickles = [pickle.dumps(r) for r in recs]  # what each rank's all_gather_object sends
    padded = world * max(map(len, pickles))
    old, peak, kept = traced(lambda: [pickle.loads(p) for p in pickles])
    rows.append(
        ("rank list, a worker", "before", peak, kept, padded / MB, f"{padded / MB:.1f} MB sent")
    )

    summed = torch.tensor(
        [[r["node"], r["local_rank"], r["pid"], fingerprint(kind_of(r))] for r in recs],
        dtype=torch.int64,
    )
    first: dict[tuple[Any, ...], bytes] = {}
    for r in recs:
        first.setdefault(kind_of(r), json.dumps(kind_of(r)).encode())
    messages = list(first.values())
    strings = sum(map(len, messages))
    table, peak, kept = traced(lambda: read_rows(summed).table(messages))
    buffers = world * 4 * 8 + min(strings, CHUNK)
    rows.append(
        (
            "rank list, a worker",
            "after",
            peak,
            kept,
            buffers / MB,
            f"{(world * 32 + strings) / MB:.1f} MB summed",
        )
    )
    assert list(table) == old, "the table reads back as the records"

    # -- the writer's context line --------------------------------------------------------------
    head = {"type": "context", "world_size": world, "nnodes": args.nodes}
    line_old, peak, _ = traced(lambda: json.dumps({**head, "ranks": old}))
    rows.append(
        ("context line, the writer", "before", peak, 0.0, 0.0, f"{len(line_old) / MB:.1f} MB line")
    )
    line_new, peak, _ = traced(lambda: json.dumps({**head, COMPACT_KEY: table.to_compact()}))
    rows.append(
        ("context line, the writer", "after", peak, 0.0, 0.0, f"{len(line_new) / MB:.2f} MB line")
    )

    # -- the launcher reading it back (run.json's `ranks`, unchanged) ---------------------------
    for way, line in (("before", line_old), ("after", line_new)):
        read, peak, kept = traced(lambda line=line: context_ranks(json.loads(line)))
        assert read["ranks"] == old
        rows.append(("context read, launcher", way, peak, kept, 0.0, "run.json as before"))
        del read

    # -- the health gather on rank 0 ------------------------------------------------------------
    snapshot = args.snapshot_bytes or health_bytes()
    sizes, peak, kept = traced(lambda: [torch.zeros(1, dtype=torch.long) for _ in range(world)])
    del sizes
    rows.append(
        ("health, rank 0", "before", peak, kept, world * snapshot / MB, f"{snapshot} B a node")
    )
    chunk = max(sum(snapshot for _ in c) for c in _chunks([snapshot] * args.nodes, CHUNK))
    gathered, peak, kept = traced(lambda: [bytes(snapshot) for _ in range(args.nodes)])
    rows.append(("health, rank 0", "after", peak, kept, chunk / MB, f"{args.nodes} snapshots kept"))
    del gathered

    print(f"{args.nodes} nodes x {args.per_node} = {world} ranks; MB (10^6 bytes)")
    head_row = ("what", "way", "py peak", "py kept", "tensor buffer", "")
    print(
        f"{head_row[0]:<26} {head_row[1]:<7} {head_row[2]:>8} {head_row[3]:>8} {head_row[4]:>13}  {head_row[5]}"
    )
    for what, way, peak, kept, buffer, note in rows:
        print(f"{what:<26} {way:<7} {peak:8.1f} {kept:8.1f} {buffer:13.1f}  {note}")


if __name__ == "__main__":
    main()
