"""An op is one declaration (issue 36, item 1): its `OpSpec` in `commbench.ops` says
everything that differs between ops, and every module reads it from there. These tests fail
when an op is known in one table and not in another, when a module lists ops of its own,
and when a made-up op declared once is refused anywhere."""

from __future__ import annotations

import ast
import math
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from commbench import ops
from commbench.collectives.ops import Buffers, Collective, Expect, Group
from commbench.collectives.registry import COLLECTIVES, collective, entry_of, selected
from commbench.collectives.specs import parse_ops, plan_size
from commbench.collectives.table import op_table, with_table
from commbench.errors import UserError
from commbench.importers.nccl_tests.export import _program, to_nccl_tests_json
from commbench.importers.nccl_tests.model import op_from_text, op_names, reduce_op_of
from commbench.ops import OPS, P2P, OpSpec, Traced
from commbench.record.capture import c10d_ops
from commbench.replay.explain import op_cost
from commbench.replay.program import rooted
from commbench.results.names import OP_NAMES
from commbench.results.network import busbw_bound
from commbench.results.runs import load_run
from commbench.results.schema import IMPORTED_OPS
from commbench.traces import names
from commbench.traces.chakra import comm_types
from commbench.traces.checks import _signature
from commbench.traces.names import canonical_op, shard, trace_ops
from commbench.traces.records import Call
from commbench.traces.records import Group as TraceGroup
from tests.factories import make_row, write_run
from tests.package_source import ROOT, parsed

CPU = torch.device("cpu")


def _group(n: int = 2) -> Group:
    return Group(handle=None, ranks=list(range(n)), rank=0)


# -- one table: every name any module knows is a declared op --------------------------------


def test_the_run_names_are_the_declared_ops() -> None:
    assert tuple(OPS) == OP_NAMES
    assert all(spec.name == name and not spec.strategy for name, spec in OPS.items())


def test_every_declared_op_has_its_entry_built_from_its_declaration() -> None:
    for name, spec in OPS.items():
        entry = collective(name)
        assert entry.spec is spec, name
        assert COLLECTIVES[spec.key] is entry


@pytest.mark.parametrize("name", list(OPS))
def test_every_op_is_issued_and_checked_by_its_entry(name: str) -> None:
    """The sweep's call and the replay's issue are one call (`Collective.operation`), and
    every op with data says what its output holds."""
    spec, entry = OPS[name], collective(name)
    bufs = entry.buffers(8, torch.float32, CPU, _group(), False)
    if name != "sendrecv":  # a batch of a send and a recv: issued as its two halves
        fn, _args, kwargs = entry.operation(bufs, _group(), 0, "sum", None)
        assert fn.__module__.startswith("torch.distributed"), (name, fn)
        assert "async_op" not in kwargs
    assert callable(entry.call)
    assert (entry.expected(bufs, _group()) == []) == spec.latency_only, name


def test_the_trace_vocabulary_is_the_declared_traced_names() -> None:
    traced = ops.traced()
    assert set(trace_ops()) == set(traced) | {"other"}
    assert set(names._SHOWN) <= set(traced)  # the messages' order names no op of its own
    assert set(P2P) == {t.name for t in OPS["sendrecv"].traced}
    for name, (spec, t) in traced.items():
        assert name == spec.op or name in P2P, name
        for spelling in (name, *t.spellings, *(op.strip("_") for op in t.c10d)):
            assert canonical_op(spelling) == name, (spelling, name)
        assert shard(name) == spec.shard


def test_every_c10d_operator_and_chakra_type_names_a_declared_op() -> None:
    assert len(c10d_ops()) == len(set(c10d_ops())) == 20
    assert sorted(comm_types()) == list(range(10))  # Chakra's CollectiveCommType 0..9
    assert set(comm_types().values()) <= set(ops.traced())


def test_nccl_tests_names_are_the_declared_ops_or_nccl_tests_own() -> None:
    assert set(op_names().values()) <= set(OPS) | set(IMPORTED_OPS)
    for op, spec in OPS.items():
        for spelling in spec.nccl_tests:
            assert op_from_text(f"./build/{spelling}_perf") == op
        if spec.nccl_tests:
            assert _program(op) == f"{spec.nccl_tests[0]}_perf"
        assert reduce_op_of(op, "sum") == ("sum" if spec.reduces else "")


# The tables issue 36 found restating the specs, as they were, each fact with the ops that
# had it and the ops that had not: a new op is in neither, and so needs no edit here.
FACTS_OF_ISSUE_36 = {
    "split": (
        ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"),
        ("all_reduce", "broadcast", "reduce", "sendrecv", "barrier"),
    ),
    "rooted": (
        ("broadcast", "reduce", "gather", "scatter"),
        ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv", "barrier"),
    ),
    "ring bound": (
        ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv"),
        ("all_to_all", "gather", "scatter", "barrier"),
    ),
    "symmetric": (
        ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "barrier"),
        ("all_to_all", "gather", "scatter", "send", "recv"),
    ),
}


def _has(fact: str, name: str) -> bool:
    if fact == "symmetric":
        return ops.traced()[name][1].symmetric
    spec = OPS[name]
    if fact == "split":
        return spec.split and not spec.skewed
    if fact == "rooted":
        return spec.rooted
    return spec.network is not None and busbw_bound(name, 16, 2, 100.0) == 100.0


@pytest.mark.parametrize("fact", FACTS_OF_ISSUE_36)
def test_each_ops_facts_agree_with_the_tables_they_replaced(fact: str) -> None:
    having, lacking = FACTS_OF_ISSUE_36[fact]
    assert [n for n in having if not _has(fact, n)] == []
    assert [n for n in lacking if _has(fact, n)] == []
    assert all(rooted(n) == OPS[spec.op].rooted for n, (spec, _) in ops.traced().items())
    assert op_cost("all_reduce", 4).steps == 6 and op_cost("barrier", 8).steps == 3
    assert op_cost("sendrecv", 4).steps == 1 and op_cost("p2p", 4).bytes_factor == 1.0


# -- no module lists ops but the declaration -------------------------------------------------

ALLOWED = {
    # the order a trace's messages list its ops in (names only, checked above)
    ("traces/names.py", "_SHOWN"),
    # nccl-tests derives n from busbw / algbw only for these (its own rule, not an op's)
    ("importers/nccl_tests/model.py", "infer_world_size"),
    # what Chakra's comm_size means for each op's output
    ("traces/chakra.py", "_call"),
}


def _literals() -> Iterator[tuple[str, str, list[str]]]:
    """(file, enclosing definition, op names) of every tuple, list, set or dict literal in
    commbench that names two ops or more (a send and its recv are one op's halves)."""
    known = set(OPS) | set(ops.traced())
    for path, tree in parsed():  # parsed once for the suite's checks of the source
        rel = path.relative_to(ROOT).as_posix()
        if rel == "ops.py":
            continue
        for top in tree.body:
            where = getattr(top, "name", "")
            if isinstance(top, ast.Assign | ast.AnnAssign):
                targets = top.targets if isinstance(top, ast.Assign) else [top.target]
                where = ",".join(t.id for t in targets if isinstance(t, ast.Name))
            for node in ast.walk(top):
                if isinstance(node, ast.Tuple | ast.List | ast.Set):
                    elts = node.elts
                elif isinstance(node, ast.Dict):
                    elts = [k for k in node.keys if k is not None]
                else:
                    continue
                found = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in known]
                if len(found) >= 2 and not set(found) <= set(P2P):
                    yield rel, where, found


def test_no_module_but_the_declaration_lists_ops() -> None:
    listed = {(rel, where): found for rel, where, found in _literals()}
    stray = {k: v for k, v in listed.items() if k not in ALLOWED}
    assert not stray, f"ops listed outside commbench/ops.py (make them an OpSpec field): {stray}"
    assert set(listed) >= ALLOWED, f"no longer lists ops: {sorted(ALLOWED - set(listed))}"


# -- no test restates the op list: each takes its ops from `OPS` ------------------------------

TESTS = Path(__file__).parent
ALLOWED_IN_TESTS = {
    # a training job's own calls, by the names it issues them as (torch's functions)
    ("jobs/compute_gap_job.py", "main"),
    # the ops of a made-up sweep that the gate's tests measure
    ("test_compare.py", "OPS"),
    # the tables issue 36 replaced, each fact with the ops on both sides (a new op is in neither)
    ("test_ops_declaration.py", "FACTS_OF_ISSUE_36"),
    # the calls a recorded job issued, picked from its trace
    (
        "test_record_stamps.py",
        "test_a_latency_bound_call_is_recorded_within_twice_the_jobs_own_clock_under_load",
    ),
    ("test_replay_integration.py", "test_a_paced_replay_waits_for_each_calls_recorded_offset"),
    # a PARAM trace fixture's calls, in its order
    ("test_trace_readers.py", "test_param_basic_trace"),
}


def _named(elts: list[ast.expr], known: set[str]) -> list[str]:
    return [e.value for e in elts if isinstance(e, ast.Constant) and e.value in known]


def _branches(test: ast.expr, known: set[str]) -> list[str]:
    """The ops a condition tests a name against in a literal (`op in ("gather", "scatter")`)."""
    found = []
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            for c in node.comparators:
                if isinstance(c, ast.Tuple | ast.List | ast.Set):
                    names = _named(c.elts, known)
                    if len(names) >= 2 and not set(names) <= set(P2P):
                        found += names
    return found


def _restated() -> Iterator[tuple[str, str, list[str]]]:
    """(file, enclosing definition, op names) of every place in tests/ that restates the op
    list: a literal naming five ops or more (most of the declaration, a table of them), or a
    condition that tests a name against two ops or more (a property of those ops, which belongs
    on their `OpSpec`, as the test's oracle belongs on their `Collective`)."""
    known = set(OPS) | set(ops.traced())
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for top in tree.body:
            where = getattr(top, "name", "")
            if isinstance(top, ast.Assign | ast.AnnAssign):
                targets = top.targets if isinstance(top, ast.Assign) else [top.target]
                where = ",".join(t.id for t in targets if isinstance(t, ast.Name))
            for node in ast.walk(top):
                found: list[str] = []
                if isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
                    elts = node.elts if not isinstance(node, ast.Dict) else node.keys
                    found = _named([e for e in elts if e is not None], known)
                    found = found if len(set(found)) >= 5 else []
                elif isinstance(node, ast.If | ast.IfExp | ast.While):
                    found = _branches(node.test, known)
                elif isinstance(node, ast.comprehension):
                    found = [n for cond in node.ifs for n in _branches(cond, known)]
                if found:
                    yield path.relative_to(TESTS).as_posix(), where, found


def test_no_test_restates_the_op_list() -> None:
    """A test that names the ops (a per-op table, a branch on an op's name) breaks when an op
    is added: it takes them from `OPS`, their facts from each `OpSpec`, their results from each
    entry's `reference`."""
    listed = {(rel, where): found for rel, where, found in _restated()}
    stray = {k: v for k, v in listed.items() if k not in ALLOWED_IN_TESTS}
    assert not stray, f"tests restating the op list (derive it from OPS): {stray}"
    gone = sorted(ALLOWED_IN_TESTS - set(listed))
    assert not gone, f"no longer lists ops, drop from ALLOWED_IN_TESTS: {gone}"


def test_the_rule_sees_a_restated_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above finds what issue 44's review found: a table keyed by every op and a
    branch on op names."""
    (tmp_path / "test_x.py").write_text(
        f"FACTOR = {dict.fromkeys(OPS, 1.0)!r}\n"
        "def oracle(op):\n"
        "    if op in ('all_gather', 'gather'):\n"
        "        return 1\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "TESTS", tmp_path)
    assert {(rel, where) for rel, where, _ in _restated()} == {
        ("test_x.py", "FACTOR"),
        ("test_x.py", "oracle"),
    }


# -- a made-up op: one declaration, and everything takes it ----------------------------------

ALL_SUM = OpSpec(
    op="all_sum",
    factor=OPS["all_reduce"].factor,
    split=False,
    reduces=True,
    in_place="always",
    steps=OPS["all_reduce"].steps,
    network=OPS["all_reduce"].network,
    traced=(
        Traced(
            "all_sum",
            ("allsum", "allsumcoalesced"),
            c10d=("allsum_",),
            chakra=(42,),
            symmetric=True,
        ),
    ),
    nccl_tests=("all_sum", "allsum"),
    entry="AllReduce",  # torch's all_reduce, under a new name
)


@pytest.fixture
def all_sum() -> Iterator[OpSpec]:
    ops.register(ALL_SUM)
    try:
        yield ALL_SUM
    finally:
        ops.unregister(ALL_SUM.name)
        COLLECTIVES.pop(ALL_SUM.key, None)


def test_a_made_up_op_takes_one_declaration(all_sum: OpSpec) -> None:
    # the command line and the planner
    assert parse_ops("all_sum") == ["all_sum"] and "all_sum" in parse_ops("all")
    assert plan_size("all_sum", 1000, "float32", 4).size_bytes == 1000
    # the registry: its entry, built from its declaration, issues and checks it
    entry = collective("all_sum")
    assert entry.spec is all_sum and selected(["all_sum"], [])[0] is entry
    bufs = entry.buffers(8, torch.float32, CPU, _group(), True)
    fn, (tensor,), _ = entry.operation(bufs, _group(), 0, "sum", None)
    assert fn is torch.distributed.all_reduce and tensor is bufs.inp
    assert entry.expected(bufs, _group())[0].source is None  # the reduction of every input
    # the trace readers and the capture
    assert canonical_op("nccl:allsum") == canonical_op("all_sum_coalesced") == "all_sum"
    assert "all_sum" in trace_ops() and comm_types()[42] == "all_sum"
    assert "allsum_" in c10d_ops()
    call = Call(
        rank=0,
        seq=0,
        op="all_sum",
        name="allsum",
        in_bytes=8,
        out_bytes=8,
        dtype="float32",
        count=2,
        group=TraceGroup(name="0", ranks=(0, 1)),
    )
    assert _signature(call) == ("all_sum", "float32", 8)
    # the model, the network accounting, nccl-tests' names
    assert op_cost("all_sum", 4) == op_cost("all_reduce", 4)
    assert busbw_bound("all_sum", 16, 2, 100.0) == 100.0
    assert op_from_text("all_sum_perf") == "all_sum" and _program("all_sum") == "all_sum_perf"


def test_a_made_up_op_is_forgotten_when_unregistered(all_sum: OpSpec) -> None:
    assert canonical_op("allsum") == "all_sum"
    ops.unregister("all_sum")
    try:
        assert canonical_op("allsum") == "other" and "all_sum" not in trace_ops()
        assert math.isclose(op_cost("all_sum", 4).bytes_factor, 1.0)
    finally:
        ops.register(all_sum)


def _made_up_rank(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist

    from commbench.replay.program import WORLD, Issue
    from commbench.replay.worker import _issue

    ops.register(ALL_SUM)  # a spawned process imports commbench afresh
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    group = Group(handle=None, ranks=[0, 1], rank=rank)
    entry = collective("all_sum")
    count = plan_size("all_sum", 64, "float32", 2).count
    bufs = entry.buffers(count, torch.float32, CPU, group, True)
    call = entry.call(bufs, group, "sum", async_op=False)
    call()
    checked = entry.check(bufs, call, group, "sum")
    bufs.inp.fill_(rank + 1)
    issue = Issue(op="all_sum", size_bytes=64, dtype="float32", group=WORLD, async_op=True)
    _issue(bufs, group, issue).wait()
    replayed = bufs.out.tolist() == [3.0] * count
    dist.destroy_process_group()
    Path(out, f"rank{rank}").write_text(f"{checked} {replayed}")


@pytest.mark.integration  # starts two processes
def test_a_made_up_op_runs_checks_and_replays_on_gloo(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_made_up_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    assert [(tmp_path / f"rank{r}").read_text() for r in range(2)] == ["True True"] * 2


# -- what the docs and the errors say of an op ------------------------------------------------


def test_the_docs_op_table_is_written_from_the_declarations() -> None:
    """docs/collectives.md's op table is `make docs`'s (`commbench.collectives.table`)."""
    doc = ROOT.parent / "docs" / "collectives.md"
    text = doc.read_text()
    assert with_table(text, str(doc)) == text, "docs/collectives.md's op table is stale: make docs"
    for name, spec in OPS.items():
        assert f"\n| {name} | {spec.call} |" in op_table()


@pytest.mark.parametrize("name", list(OPS))
def test_each_ops_documented_call_is_the_one_its_entry_issues(name: str) -> None:
    entry = collective(name)
    bufs = entry.buffers(8, torch.float32, CPU, _group(), False)
    try:
        fn, _, _ = entry.operation(bufs, _group(), 0, "sum", None)
    except NotImplementedError:  # not one call (sendrecv: a batch of a send and a recv)
        return
    assert f"`{fn.__name__}`" in OPS[name].call, (name, fn.__name__)


def test_an_unknown_op_is_named_with_where_ops_are_declared() -> None:
    with pytest.raises(LookupError) as unknown:
        collective("no_such_op")
    message = str(unknown.value)
    assert "'no_such_op'" in message and "commbench/ops.py" in message
    assert "\n" not in message
    spec = replace(ALL_SUM, op="all_nothing", traced=(), nccl_tests=(), entry="AllNothing")
    with pytest.raises(LookupError, match=r"op 'all_nothing'.*'AllNothing' is no Collective"):
        entry_of(spec)


def test_an_entry_without_its_oracle_says_so() -> None:
    class NoOracle(Collective):
        def expected(self, bufs: Buffers, group: Group) -> list[Expect]:
            return []

    with pytest.raises(NotImplementedError, match=r"NoOracle .*no `reference`"):
        NoOracle(ALL_SUM).reference([], 0, "sum")


def test_nccl_tests_json_refuses_an_op_nccl_tests_has_not(tmp_path: Path) -> None:
    """An op without an nccl-tests program (`OpSpec.nccl_tests` empty) is refused in one line
    naming it, never written under a program name made up for it."""
    alone = replace(ALL_SUM, traced=(), nccl_tests=())
    ops.register(alone)
    try:
        run = load_run(
            write_run(
                tmp_path / "run",
                [make_row(1 << 20, world_size=2)],
                {"kind": "collectives", "status": "complete", "context": {"world_size": 2}},
            )
        )
        run.rows.append(make_row(1 << 20, op="all_sum", world_size=2))
        with pytest.raises(UserError) as refused:
            to_nccl_tests_json(run, op="all_sum")
        assert "nccl-tests has no program for all_sum" in str(refused.value)
        assert str(run.path) in str(refused.value) and "\n" not in str(refused.value)
        with pytest.raises(UserError, match="no program for all_to_allv"):
            _program("all_to_allv")
        assert _program("hypercube") == "hypercube_perf"  # nccl-tests' own, imported
    finally:
        ops.unregister(alone.name)
