"""Every strategy, launched for real with gloo on CPU at world sizes 2, 3 and 4.

World size 3 catches chunking bugs: 250 and 1025 elements do not split evenly, and 1
element (4 B) leaves some ring chunks empty. 256 KiB + 4 B at n=4 gives 64 KiB chunks, so
the ring pipelines two slices per step over uneven chunks.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from typer.testing import CliRunner

from commbench.cli import app
from commbench.collectives import ops
from commbench.collectives.registry import collective
from commbench.collectives.settings import CollectivesSettings
from commbench.collectives.specs import STRATEGIES
from commbench.launch.launcher import run_collectives
from commbench.results.csv_rows import CSV_COLUMNS, ISSUE_CSV_COLUMNS
from commbench.results.record import RunStatus
from commbench.results.runs import load_run
from commbench.strategies.report import comparison_records
from tests.factories import collectives_settings


def settings(n: int, dtype: str, reduce_op: str, sizes: list[int]) -> CollectivesSettings:
    return collectives_settings(
        ops=[],
        strategies=list(STRATEGIES),
        sizes=sizes,
        nproc=n,
        backend="gloo",
        device="cpu",
        dtype=dtype,
        reduce_op=reduce_op,
        iters=3,
        warmup=1,
        timeout=120,
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    ("n", "dtype", "reduce_op", "sizes"),
    [
        (3, "int32", "sum", [4, 1000, 4100]),
        (3, "float32", "avg", [4, 1000]),
        (4, "float32", "sum", [4, 1000, 262148]),
        (4, "int32", "max", [1000]),
    ],
)
def test_every_strategy_matches_direct(
    tmp_path: Path, n: int, dtype: str, reduce_op: str, sizes: list[int]
) -> None:
    outcome = run_collectives(settings(n, dtype, reduce_op, sizes), tmp_path)
    assert outcome.status == RunStatus.COMPLETE, outcome.failure
    rows = outcome.rows
    assert [(r.strategy, r.requested_bytes) for r in rows] == [
        (s, size) for s in STRATEGIES for size in sizes
    ]
    for r in rows:
        assert r.check == "ok", (r.strategy, r.size_bytes, r.note)
        assert r.op == "all_reduce" and r.world_size == n and r.reduce_op == reduce_op
        assert r.stats.n == 3 and math.isfinite(r.time_us)
        assert r.algbw_gbps is not None
        assert r.busbw_gbps == pytest.approx(r.algbw_gbps * 2 * (n - 1) / n)
    header = (outcome.run_dir / "results.csv").read_text().splitlines()[0].split(",")
    assert header == [*CSV_COLUMNS, *ISSUE_CSV_COLUMNS]  # every row measured has its host's rate
    assert {r.strategy for r in load_run(outcome.run_dir).rows} == set(STRATEGIES)
    records = comparison_records(rows, backend="gloo")
    assert len(records) == len(rows)
    assert all(r["vs_direct"] is not None for r in records)
    assert sum(r["fastest"] for r in records) == len(sizes)


@pytest.mark.integration
def test_cli_strategies_alone_run_only_the_strategies_and_compare(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "collectives",
            "--strategies",
            "all",
            "--device",
            "cpu",
            "--nproc",
            "2",
            "--dtype",
            "float32",
            "--reduce-op",
            "prod",
            "--sizes",
            "4,1000,64K",
            "--iters",
            "3",
            "--warmup",
            "1",
            "-o",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    (run_dir,) = tmp_path.iterdir()
    rows = load_run(run_dir).rows
    assert {r.strategy for r in rows} == set(STRATEGIES)  # no plain ops
    assert all(r.check == "ok" for r in rows)
    out = result.stdout
    assert "all_reduce strategies  float32  op=prod  2 ranks" in out
    assert "vs_direct" in out and "meas/model" in out
    # 3 iterations on a busy machine may not grow with size: then the table says why
    assert "fitted to 3 direct all_reduce points" in out or "model not fitted" in out


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield ops.Group(handle=None, ranks=[0], rank=0)
    dist.destroy_process_group()


def test_check_catches_a_wrong_strategy(world_of_one: ops.Group) -> None:
    group = world_of_one
    for strategy in STRATEGIES:
        entry = collective("all_reduce", strategy)
        bufs = entry.buffers(250, torch.float32, torch.device("cpu"), group, False)
        call = entry.call(bufs, group, "sum", async_op=False)
        assert entry.check(bufs, call, group, "sum")

        def corrupt(bufs: ops.Buffers = bufs) -> None:
            bufs.inp[7] += 1

        def forget(bufs: ops.Buffers = bufs) -> None:
            bufs.inp.zero_()

        assert not entry.check(bufs, corrupt, group, "sum")
        assert not entry.check(bufs, forget, group, "sum")
