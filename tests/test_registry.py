"""The registry of collectives: every entry keeps the protocol's promises, and the harness
(the worker, the probe) runs any entry, a new one included, without knowing its name.

Real gloo process groups throughout: world 1 in this process, world 2 in two spawned ones.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import commbench.launch.probe as probe_module
import commbench.launch.worker as worker_module
from commbench.collectives import pattern
from commbench.collectives.ops import (
    TORCH_DTYPES,
    Buffers,
    Collective,
    Expect,
    Group,
)
from commbench.collectives.registry import COLLECTIVES, collective, selected
from commbench.collectives.settings import CollectivesSettings
from commbench.collectives.specs import OPS, STRATEGIES, OpSpec, plan_size
from commbench.launch.protocol import EVENTS_FILE
from commbench.results.schema import CHECK_FAILED, CHECK_OK
from commbench.results.store import RunDir
from tests.factories import collectives_settings

ENTRIES = sorted(COLLECTIVES, key=lambda key: (key[1], key[0]))
WORLDS = [1, 2, 3, 4, 8, 16, 1024]


def _formula(text: str, n: int) -> float:
    """An op's declared busbw formula (`OpSpec.formula`, as nccl-tests' doc/PERFORMANCE.md and
    docs/collectives.md write it: `2(n-1)/n`) at n ranks."""
    assert re.fullmatch(r"[0-9n()+\-*/ ]+", text), text
    return float(eval(re.sub(r"([0-9)])\(", r"\1*(", text), {"n": n}))


def test_every_spec_has_one_implementation_and_every_implementation_a_spec() -> None:
    specs = [*OPS.values(), *STRATEGIES.values()]
    assert sorted(COLLECTIVES) == sorted(spec.key for spec in specs)
    for spec in specs:
        assert collective(spec.op, spec.strategy).spec is spec
    assert [e.spec.name for e in selected(list(OPS), list(STRATEGIES))] == [
        *OPS,
        *STRATEGIES,
    ]


@pytest.mark.parametrize("key", ENTRIES, ids="/".join)
def test_busbw_factor_follows_performance_md(key: tuple[str, str]) -> None:
    """The factor the rows use is the formula the docs' op table shows (`OpSpec.formula`)."""
    spec = collective(*key).spec
    assert bool(spec.formula) != spec.latency_only, spec.name  # each op with data states it
    assert spec.call, spec.name  # and its torch call, for the same table
    for n in WORLDS:
        if spec.latency_only:
            assert spec.busbw_factor(n) is None
        elif n == 1:
            assert spec.busbw_factor(n) is None  # nothing moves between ranks: no bandwidth
        else:
            assert spec.busbw_factor(n) == pytest.approx(_formula(spec.formula, n)), n


@pytest.mark.parametrize("key", [k for k in ENTRIES if not COLLECTIVES[k].spec.latency_only])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_buffers_hold_what_nccl_tests_moves(key: tuple[str, str], n: int) -> None:
    """Each rank's buffers are nccl-tests' send and receive counts, and S (what algbw and
    busbw divide by the time) is the larger of the two."""
    entry = collective(*key)
    spec = entry.spec
    for requested in (4096, 1000, 3):
        plan = plan_size(spec.op, requested, "float32", n)
        for r in range(n):
            bufs = entry.buffers(
                plan.count,
                torch.float32,
                torch.device("cpu"),
                Group(None, list(range(n)), r),
                False,
            )
            sizes = (bufs.inp.numel(), bufs.out.numel())
            assert sizes == spec.elements(plan.count, n), (n, r, requested)
            assert max(sizes) * 4 == plan.size_bytes


def test_no_harness_names_an_entry() -> None:
    """The worker and the probe hold no op or strategy name: they run what the registry gives."""
    names = set(OPS) | set(STRATEGIES)
    for module in (worker_module, probe_module):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        assert not names & literals, module.__name__


# --- world 2: every entry, real ops, in two spawned processes ----------------------------------


def _world2_rank(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    group = Group(handle=None, ranks=[0, 1], rank=rank)
    found: dict[str, Any] = {}
    for (op, strategy), entry in sorted(COLLECTIVES.items()):
        for dtype, reduce_op in (("float32", "sum"), ("int32", "max"), ("float16", "avg")):
            count = plan_size(op, 1001 * 4, dtype, 2).count
            bufs = entry.buffers(count, TORCH_DTYPES[dtype], torch.device("cpu"), group, False)
            call = entry.call(bufs, group, reduce_op, async_op=False)
            call()  # a timed iteration, on zeros
            good = entry.check(bufs, call, group, reduce_op)

            def off_by_one(call: Callable[[], None] = call, bufs: Buffers = bufs) -> None:
                call()
                bufs.out[bufs.out.numel() // 2] += 1

            def nothing(bufs: Buffers = bufs) -> None:
                bufs.out.zero_()

            found[f"{op}/{strategy}/{dtype}/{reduce_op}"] = [
                good,
                entry.check(bufs, off_by_one, group, reduce_op),
                entry.check(bufs, nothing, group, reduce_op),
            ]
    dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(found))


@pytest.fixture(scope="module")
def world2(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, list[bool]]]:
    where = tmp_path_factory.mktemp("world2")
    mp.spawn(_world2_rank, args=(str(where / "store"), str(where)), nprocs=2, join=True)
    return [json.loads((where / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.integration  # the module's fixture `world2` starts processes
@pytest.mark.parametrize("key", ENTRIES, ids="/".join)
def test_every_entry_passes_its_check_and_catches_corruption(
    world2: list[dict[str, list[bool]]], key: tuple[str, str]
) -> None:
    spec = collective(*key).spec
    for case in [c for c in world2[0] if tuple(c.split("/")[:2]) == key]:
        for rank, found in enumerate(world2):
            good, off_by_one, nothing = found[case]
            assert good, (case, rank)
            if spec.latency_only:
                assert off_by_one and nothing  # nothing to check: always passes
            elif rank == 0 or not spec.rooted:  # a rooted op's result is the root's only
                assert not off_by_one and not nothing, (case, rank)


# --- a new entry runs through the same harness, unchanged ----------------------------------------


def _copy_spec(name: str) -> OpSpec:
    return OpSpec(op=name, factor=lambda n: 1.0, split=False, reduces=False, in_place="never")


class LocalCopy(Collective):
    """A toy op: each rank copies its input to its output, once the group has met."""

    spec = _copy_spec("toy_copy")

    def buffers(
        self, count: int, dtype: torch.dtype, device: torch.device, group: Group, in_place: bool
    ) -> Buffers:
        return Buffers(inp=torch.zeros(count, dtype=dtype), out=torch.zeros(count, dtype=dtype))

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        if bufs.inp.dtype == torch.int8:
            raise RuntimeError("toy_copy has no int8 kernel")

        def run() -> None:
            dist.barrier(group=group.handle)
            bufs.out.copy_(bufs.inp)

        return run

    def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
        return [Expect(bufs.out, 0, group.rank)]


class BrokenCopy(LocalCopy):
    """The toy with a bug: it copies all but the last element."""

    spec = _copy_spec("toy_broken")

    def call(
        self, bufs: Buffers, group: Group, reduce_op: str, async_op: bool
    ) -> Callable[[], None]:
        head, into = bufs.inp[:-1], bufs.out[:-1]

        def run() -> None:
            into.copy_(head)

        return run


@pytest.fixture
def toys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the toys: a spec (what the CLI and the settings know) and an entry."""
    for toy in (LocalCopy(), BrokenCopy()):
        monkeypatch.setitem(OPS, toy.spec.name, toy.spec)
        monkeypatch.setitem(COLLECTIVES, toy.spec.key, toy)
    monkeypatch.setattr(pattern, "progress", pattern.progress)  # the worker points it elsewhere


def _settings(**kw: Any) -> CollectivesSettings:
    base: dict[str, Any] = dict(
        ops=["toy_copy"], sizes=[4096, 65536], nproc=1, backend="gloo", device="cpu", iters=3
    )
    return collectives_settings(**{**base, **kw})


def test_the_probe_runs_a_new_entry(toys: None) -> None:
    assert probe_module.probe(_settings().to_dict())["ok"] is True
    answer = probe_module.probe(_settings(dtype="int8").to_dict())
    assert answer == {
        "ok": False,
        "error": "gloo cannot run toy_copy with dtype int8: toy_copy has no int8 kernel",
    }


def test_the_worker_measures_and_checks_a_new_entry(
    toys: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hold_port: Any
) -> None:
    settings = _settings(ops=["toy_copy", "toy_broken", "all_reduce"])
    RunDir(tmp_path).settings_file.write_text(json.dumps(settings.to_dict()))
    with hold_port() as port:
        for name, value in dict(
            RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=port
        ).items():
            monkeypatch.setenv(name, str(value))
        worker_module.main([str(tmp_path)])  # the worker's own entry point, in this process
    events = [json.loads(line) for line in (tmp_path / EVENTS_FILE).read_text().splitlines()]
    rows = [e["row"] for e in events if e["type"] == "row"]
    assert [(r["op"], r["size_bytes"]) for r in rows] == [
        ("toy_copy", 4096),
        ("toy_copy", 65536),
        ("toy_broken", 4096),
        ("toy_broken", 65536),
        ("all_reduce", 4096),
        ("all_reduce", 65536),
    ]
    checks = {r["op"]: r["check"] for r in rows}
    assert checks == {"toy_copy": CHECK_OK, "toy_broken": CHECK_FAILED, "all_reduce": CHECK_OK}
    assert events[-1] == {"type": "done", "version": 1}  # a `protocol.Done`
