"""The workers' rank list, compact (issue 45): read back as the records the workers made, in
the journal's context line and through the real gathers of a gloo world."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from commbench.errors import UserError
from commbench.launch.gather import _chunks
from commbench.launch.ranks import COMPACT_KEY, RankTable, context_ranks, rank_record
from commbench.launch.watchdog import Watch


def _records(nodes: int, per_node: int, **odd: dict[str, Any]) -> list[dict[str, Any]]:
    """Records as the workers make them; `odd` maps a rank (as a string) to fields it has
    of its own."""
    out = []
    for node in range(nodes):
        for local in range(per_node):
            rank = len(out)
            fields = {
                "rank": rank,
                "local_rank": local,
                "host": f"h{node}",
                "node": node,
                "pid": 1000 * node + local + (7 if local == 3 else 0),
                "address": f"10.0.0.{node}",
                "device": f"cuda:{local}",
                "device_name": "NVIDIA H100 80GB HBM3",
                **odd.get(str(rank), {}),
            }
            out.append(rank_record(**fields))
    return out


@pytest.mark.parametrize(
    "odd",
    [
        {},
        {"5": {"device_name": "NVIDIA A100"}, "6": {"device": "cuda:0"}},
        {"1": {"address": None}, "9": {"host": "elsewhere", "pid": 1}},
    ],
    ids=["alike", "a GPU of its own", "no address"],
)
def test_the_compact_line_reads_back_as_every_rank_s_record(odd: dict[str, Any]) -> None:
    records = _records(3, 4, **odd)
    table = RankTable.from_records(records)
    assert list(table) == records and table[-1] == records[-1] and table[2:4] == records[2:4]
    line = json.loads(
        json.dumps({"type": "context", "world_size": 12, COMPACT_KEY: table.to_compact()})
    )
    read = context_ranks(line)
    assert read["ranks"] == records and read["world_size"] == 12 and COMPACT_KEY not in read
    assert table.nnodes == 3


def test_the_compact_line_grows_with_the_nodes_not_the_ranks_strings() -> None:
    """The strings a node's ranks share are stored once: 64 ranks a node add integers only."""
    few = len(json.dumps(RankTable.from_records(_records(8, 1)).to_compact()["kinds"]))
    many = len(json.dumps(RankTable.from_records(_records(8, 64)).to_compact()["kinds"]))
    assert few == many


def test_an_older_line_with_the_list_is_read_as_it_is() -> None:
    records = _records(2, 2)
    assert context_ranks({"world_size": 4, "ranks": records}) == {"world_size": 4, "ranks": records}


_GOOD = {
    "world": 2,
    "node": [[0, 0, 2]],
    "local_rank": [[0, 1, 2]],
    "kind": [[0, 0, 2]],
    "pid": [1, 2],
    "kinds": [["h", None, "cpu", "cpu"]],
}


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {k: v for k, v in _GOOD.items() if k != "node"},
        {**_GOOD, "kind": [[1, 0, 2]]},
        {**_GOOD, "kind": [[0, 0, 3]]},
        {**_GOOD, "kinds": [["h", None]]},
        {**_GOOD, "local_rank": [[0, 1]]},
    ],
    ids=["not a table", "no runs", "a kind not among", "other lengths", "short kind", "bad run"],
)
def test_a_table_that_does_not_read_is_refused_in_words(bad: Any) -> None:
    assert context_ranks({COMPACT_KEY: _GOOD})["ranks"][1]["local_rank"] == 1
    with pytest.raises(UserError):
        context_ranks({COMPACT_KEY: bad})


def test_a_run_past_the_world_is_refused_before_it_is_expanded() -> None:
    """A line that claims 10^12 ranks of a node must not take the launcher's memory."""
    with pytest.raises(UserError, match="runs past the world's 2 ranks"):
        context_ranks({COMPACT_KEY: {**_GOOD, "node": [[0, 0, 10**12]]}})


def test_the_watch_skips_a_table_that_does_not_read_with_a_warning(tmp_path: Path) -> None:
    watch = Watch(tmp_path, [])
    context = watch._context({"type": "context", "world_size": 2, COMPACT_KEY: {"world": 2}})
    assert context == {"world_size": 2}
    assert any("context message" in w for w in watch.skips.warnings)


def test_chunks_keep_each_buffer_within_its_limit() -> None:
    assert _chunks([3, 3, 3, 10, 1], 6) == [range(0, 2), range(2, 3), range(3, 4), range(4, 5)]
    assert _chunks([], 6) == []


_WORLD = """
import json, os, sys
import torch.distributed as dist
from commbench.launch.gather import gather_ranks, gather_sparse
from commbench.launch.ranks import rank_record
import torch

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo")
cpu = torch.device("cpu")
# messages from ranks 1 and 3 only, in buffers of 5 bytes: several chunks
own = f"message of {rank}".encode() if rank in (1, 3) else None
to_0 = gather_sparse(own, [1, 3], rank, cpu, dst=0, limit=5)
to_all = gather_sparse(own, [1, 3], rank, cpu, dst=None, limit=5)
node, local = divmod(rank, 2)
record = rank_record(rank=rank, local_rank=local, host=f"h{node}", node=node, pid=os.getpid(),
                     address=None, device="cpu", device_name="cpu")
table = gather_ranks(record, world, cpu)
print(json.dumps({"to_0": None if to_0 is None else [m.decode() for m in to_0],
                  "to_all": [m.decode() for m in to_all], "table": list(table),
                  "kinds": len(table.kinds)}))
dist.destroy_process_group()
"""


@pytest.mark.integration  # four processes in a real gloo world
def test_the_gathers_deliver_in_a_real_world(free_port: int) -> None:
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port), "WORLD_SIZE": "4"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(_WORLD)],
            env={**os.environ, **env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    got = [json.loads(out) for out, _ in outs]
    messages = ["message of 1", "message of 3"]
    assert got[0]["to_0"] == messages and all(g["to_0"] is None for g in got[1:])
    assert all(g["to_all"] == messages for g in got)
    tables = [g["table"] for g in got]
    assert all(t == tables[0] for t in tables) and [r["rank"] for r in tables[0]] == [0, 1, 2, 3]
    assert [(r["node"], r["local_rank"], r["host"]) for r in tables[0]] == [
        (0, 0, "h0"),
        (0, 1, "h0"),
        (1, 0, "h1"),
        (1, 1, "h1"),
    ]
    assert [r["pid"] for r in tables[0]] == [p.pid for p in procs]
    assert got[0]["kinds"] == 2  # a node's strings once
