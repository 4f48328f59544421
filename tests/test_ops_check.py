"""The exact check, in-process at world size 1 (real gloo process group, real ops).

At world size 1 every op is a copy or identity, so a call that does nothing leaves the
zeros of the timed iterations in place; the check must catch that for every op.
"""

from typing import Any

import pytest
import torch
import torch.distributed as dist

from commbench.collectives import ops, pattern
from commbench.collectives.registry import collective
from commbench.collectives.specs import OPS
from commbench.skew import Skew


@pytest.fixture(scope="module")
def world1():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield ops.Group(handle=None, ranks=[0], rank=0)
    dist.destroy_process_group()


ALL_CHECKED = [op for op, spec in OPS.items() if not spec.latency_only]
"""Every op with a result to check (each states its oracle, `Collective.reference`)."""
CHECKED = [op for op in ALL_CHECKED if not OPS[op].too_few_ranks(1)]
"""Those that run on one rank."""


@pytest.mark.parametrize("op", CHECKED)
@pytest.mark.parametrize(
    ("dtype", "reduce_op"),
    [("float32", "sum"), ("int32", "max"), ("bfloat16", "prod"), ("float16", "avg")],
)
def test_real_op_passes_its_check(world1, op: str, dtype: str, reduce_op: str) -> None:
    entry = collective(op)
    bufs = entry.buffers(1000, ops.TORCH_DTYPES[dtype], torch.device("cpu"), world1, in_place=False)
    call = entry.call(bufs, world1, reduce_op, async_op=False)
    call()  # a timed iteration on zeros
    assert entry.check(bufs, call, world1, reduce_op)


@pytest.mark.parametrize("op", CHECKED)
def test_an_op_that_moves_nothing_fails_its_check(world1, op: str) -> None:
    entry = collective(op)
    bufs = entry.buffers(64, torch.float32, torch.device("cpu"), world1, in_place=False)
    if bufs.inp is bufs.out:
        # in-place ops: corrupt the result instead of skipping the call
        def call() -> None:
            bufs.out.add_(1)
    else:

        def call() -> None:
            pass

    assert not entry.check(bufs, call, world1, "sum")


@pytest.mark.parametrize("op", [op for op, spec in OPS.items() if spec.in_place == "optional"])
def test_in_place_buffers_alias(world1, op: str) -> None:
    entry = collective(op)
    bufs = entry.buffers(64, torch.float32, torch.device("cpu"), world1, in_place=True)
    assert bufs.inp.data_ptr() == bufs.out.data_ptr()
    call = entry.call(bufs, world1, "sum", async_op=True)
    assert entry.check(bufs, call, world1, "sum")


def test_async_op_waits_for_completion(world1) -> None:
    entry = collective("all_reduce")
    bufs = entry.buffers(256, torch.float32, torch.device("cpu"), world1, in_place=False)
    call = entry.call(bufs, world1, "sum", async_op=True)
    assert entry.check(bufs, call, world1, "sum")


def test_sum_pattern_stays_exact_on_large_worlds() -> None:
    # 3 x 100 > 256: small-integer sums would round in bf16, so the check switches to ones
    reduces = OPS["all_reduce"].reduces
    assert pattern.pattern_kind(reduces, "sum", 100, torch.bfloat16) == "ones"
    assert pattern.pattern_kind(reduces, "sum", 100, torch.float32) == "sum"
    assert pattern.pattern_kind(reduces, "sum", 50, torch.int8) == "ones"
    expected = pattern.Table("ones", "sum", 100)
    assert set(expected.host().tolist()) == {1.0, 2.0}  # exact in any dtype, and not constant
    assert pattern.verify(expected.host().to(torch.bfloat16), 0, expected)


def test_avg_tolerance_grows_with_the_world() -> None:
    expected = pattern.Table("sum", "avg", 2)
    exact = expected.host()[:8].to(torch.float32)
    off_by_some_ulps = exact * (1 + 6 * torch.finfo(torch.float32).eps)
    assert pattern.verify(exact, 0, expected, avg_of=2)
    assert not pattern.verify(off_by_some_ulps, 0, expected, avg_of=2)
    assert pattern.verify(off_by_some_ulps, 0, expected, avg_of=24)
    assert not pattern.verify(off_by_some_ulps, 0, expected)  # anything but AVG is exact


# --- the guarantees, at world sizes 2-4 --------------------------------------------------------
#
# The check of one rank needs the other ranks only through the op's output, so a world of n
# is simulated here: every rank's input is what the check itself filled in (captured by a call
# that only copies it), the op's true output is computed from those inputs with plain tensor
# arithmetic, and the call under test writes that output, or a corrupted copy, into the
# rank's buffer. The check must accept the true output and reject every corruption.

CASES = [  # (dtype, reduce_op): every dtype and every reduce op at least once
    ("float32", "sum"),
    ("bfloat16", "sum"),
    ("float16", "avg"),
    ("float64", "avg"),
    ("int8", "max"),
    ("uint8", "min"),
    ("int32", "prod"),
    ("bfloat16", "prod"),
    ("int64", "sum"),
]


def _group(n: int, r: int) -> ops.Group:
    return ops.Group(handle=None, ranks=list(range(n)), rank=r)


def _inputs(op: str, count: int, dtype: torch.dtype, n: int, reduce_op: str) -> list[torch.Tensor]:
    """Each rank's input as the check fills it."""
    out = []
    for q in range(n):
        entry = collective(op)
        bufs = entry.buffers(count, dtype, torch.device("cpu"), _group(n, q), False)
        seen: list[torch.Tensor] = []
        entry.check(bufs, lambda b=bufs, s=seen: s.append(b.inp.clone()), _group(n, q), reduce_op)
        out.append(seen[0])
    return out


def _true_output(op: str, inputs: list[torch.Tensor], r: int, reduce_op: str) -> torch.Tensor:
    """What rank r's output buffer holds after a correct `op`: its entry's oracle."""
    good = collective(op).reference(inputs, r, reduce_op)
    assert good is not None, (op, r, "no output defined here")
    return good


def _defined(op: str, inputs: list[torch.Tensor], r: int) -> bool:
    """Rank r's output is defined (a rooted op's only at its root)."""
    return collective(op).reference(inputs, r, "sum") is not None


def _corruptions(
    op: str, inputs: list[torch.Tensor], r: int, reduce_op: str, count: int
) -> dict[str, torch.Tensor]:
    """Wrong outputs the check must reject, by name: the same for every op, so a new op is
    held to them all without naming it here."""
    n, good = len(inputs), _true_output(op, inputs, r, reduce_op)
    bad = {"zeros": torch.zeros_like(good)}
    for where in (0, good.numel() // 2, good.numel() - 1):
        off = good.clone()
        off[where] += 1
        bad[f"element {where} off by one"] = off
    half = good.numel() // 2
    bad["halves swapped"] = torch.cat((good[half:], good[:half]))
    entry = collective(op)
    bufs = entry.buffers(count, good.dtype, torch.device("cpu"), _group(n, r), False)
    pieces = [e.out.numel() for e in entry.expected(bufs, _group(n, r))]
    if len(pieces) >= 2 and pieces[0] == pieces[1] and sum(pieces) == good.numel():
        # an output of one piece per member: two members' pieces in each other's place
        swapped = list(good.split(pieces))
        swapped[0], swapped[1] = swapped[1], swapped[0]
        bad["pieces 0 and 1 swapped"] = torch.cat(swapped)
    # what the root's, a neighbour's or its own output or input holds, where it has the shape
    near = sorted({0, (r - 1) % n, r, (r + 1) % n})
    others = {
        f"rank {q}'s output": _true_output(op, inputs, q, reduce_op)
        for q in near
        if q != r and _defined(op, inputs, q)
    }
    others.update({f"rank {q}'s input": inputs[q] for q in near})
    for name, other in others.items():
        if other.shape == good.shape and not torch.equal(other, good):
            bad[name] = other
    return bad


def _check_with_output(
    op: str, count: int, dtype: torch.dtype, n: int, r: int, reduce_op: str, output: torch.Tensor
) -> bool:
    entry = collective(op)
    bufs = entry.buffers(count, dtype, torch.device("cpu"), _group(n, r), False)
    return entry.check(bufs, lambda: bufs.out.copy_(output), _group(n, r), reduce_op)


def _assert_guarantees(
    op: str, dtype: str, reduce_op: str, n: int, count: int, ranks: list[int] | None = None
) -> None:
    torch_dtype = ops.TORCH_DTYPES[dtype]
    inputs = _inputs(op, count, torch_dtype, n, reduce_op)
    if not OPS[op].reduces:  # data that only moves is distinct per rank
        assert all(not torch.equal(inputs[a], inputs[b]) for a in range(n) for b in range(a))
    for r in range(n) if ranks is None else ranks:
        if not _defined(op, inputs, r):
            continue  # a rooted op's output is its root's only
        good = _true_output(op, inputs, r, reduce_op)
        assert _check_with_output(op, count, torch_dtype, n, r, reduce_op, good), (op, r)
        for name, bad in _corruptions(op, inputs, r, reduce_op, count).items():
            assert not torch.equal(bad, good), (op, r, name, "the pattern repeats")
            ok = _check_with_output(op, count, torch_dtype, n, r, reduce_op, bad)
            assert not ok, (op, r, name)


@pytest.mark.parametrize("op", ALL_CHECKED)
@pytest.mark.parametrize(("dtype", "reduce_op"), CASES)
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("per_rank", [360, 1001])
def test_the_check_accepts_the_true_result_and_rejects_corruptions(
    op: str, dtype: str, reduce_op: str, n: int, per_rank: int
) -> None:
    # 360 elements per rank: chunks a multiple of 3, which a pattern of period 3 could not
    # tell apart when swapped; 1001: chunks at odd offsets (unaligned for wide comparisons)
    _assert_guarantees(op, dtype, reduce_op, n, per_rank * n)


@pytest.mark.parametrize("op", ALL_CHECKED)
@pytest.mark.parametrize(("dtype", "reduce_op"), [("float32", "sum"), ("int8", "max")])
def test_large_buffers_are_checked_piece_by_piece(
    monkeypatch: pytest.MonkeyPatch, op: str, dtype: str, reduce_op: str
) -> None:
    # Scaled down: rows of one period, chunks of two rows and a bit, so buffers span several
    # chunks, each starting at another phase of the pattern, with whole rows and a tail.
    monkeypatch.setattr(pattern, "ROW", pattern.PERIOD)
    monkeypatch.setattr(pattern, "CHUNK", 2 * pattern.PERIOD + 5)
    _assert_guarantees(op, dtype, reduce_op, 2, 2 * (5 * pattern.PERIOD + 3))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_avg_accepts_nccl_rounding(dtype: str) -> None:
    """NCCL averages as a sum of inputs premultiplied by 1/n, rounding at every step: at
    n = 3 that is not the correctly rounded average, and must still pass."""
    n, count, torch_dtype = 3, 3 * 1001, ops.TORCH_DTYPES[dtype]
    inputs = _inputs("all_reduce", count, torch_dtype, n, "avg")
    scale = torch.tensor(1 / n, dtype=torch_dtype)
    premul = inputs[0] * scale
    for x in inputs[1:]:
        premul = premul + x * scale
    assert not torch.equal(premul, _true_output("all_reduce", inputs, 0, "avg"))
    assert _check_with_output("all_reduce", count, torch_dtype, n, 0, "avg", premul)
    premul[5] = premul[5] * (1 + 8 * torch.finfo(torch_dtype).eps)  # past (n + 4) half-ulps
    assert not _check_with_output("all_reduce", count, torch_dtype, n, 0, "avg", premul)


@pytest.mark.parametrize("op", [op for op, spec in OPS.items() if spec.reduces and not spec.rooted])
@pytest.mark.parametrize(
    ("dtype", "reduce_op", "n"),
    [("bfloat16", "sum", 100), ("int8", "sum", 50), ("int8", "prod", 64), ("float32", "max", 16)],
)
def test_large_worlds_keep_the_guarantees(op: str, dtype: str, reduce_op: str, n: int) -> None:
    # sums past the dtype's exact integers switch to 'ones' (1 or 2 ranks hold a 1 per index)
    _assert_guarantees(op, dtype, reduce_op, n, 64 * n, ranks=[0, n - 1])


# --- all_to_allv with uneven splits ------------------------------------------------------------


def _skewed_outputs(skew: Skew, count: int, n: int) -> tuple[list[torch.Tensor], list[Any]]:
    """Each rank's true output under `skew`, and the entry; inputs as the check fills them."""
    entry = collective("all_to_allv").for_skew(skew)
    inputs = []
    for q in range(n):
        bufs = entry.buffers(count, torch.float32, torch.device("cpu"), _group(n, q), False)
        seen: list[torch.Tensor] = []
        entry.check(bufs, lambda b=bufs, s=seen: s.append(b.inp.clone()), _group(n, q), "sum")
        inputs.append(seen[0])
    sends = [skew.send(q, count, n) for q in range(n)]
    outputs = []
    for r in range(n):
        pieces = []
        for s in range(n):
            start = sum(sends[s][:r])
            pieces.append(inputs[s][start : start + sends[s][r]])
        outputs.append(torch.cat(pieces))
    return outputs, [entry, inputs, sends]


@pytest.mark.parametrize("text", ["zipf:1.2", "zipf:4", "hot:3"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_skewed_all_to_allv_checks_every_received_element(text: str, n: int) -> None:
    skew = Skew.parse(text, seed=1)
    count = 1001 * n
    outputs, (entry, inputs, sends) = _skewed_outputs(skew, count, n)

    def passes(r: int, output: torch.Tensor) -> bool:
        bufs = entry.buffers(count, torch.float32, torch.device("cpu"), _group(n, r), False)
        assert bufs.out.numel() == output.numel() == sum(skew.recv(r, count, n))
        return entry.check(bufs, lambda: bufs.out.copy_(output), _group(n, r), "sum")

    for r in range(n):
        good = outputs[r]
        assert passes(r, good), r
        bad = {"zeros": torch.zeros_like(good), "shifted": torch.roll(good, 1)}
        for where in (0, good.numel() // 2, good.numel() - 1):
            off = good.clone()
            off[where] += 1
            bad[f"element {where}"] = off
        # the right length from the wrong place: the same source's chunk for another rank, and
        # another source's chunk for this rank
        s, d = (r + 1) % n, (r + 1) % n
        start = sum(sends[s][:d])
        length = sends[s][r]
        other = inputs[s][start : start + length]
        if other.numel() == length and length:
            wrong = good.clone()
            at = sum(sends[q][r] for q in range(s))
            wrong[at : at + length] = other
            bad["another destination's chunk"] = wrong
        if sends[0][r] and sends[1][r] >= sends[0][r]:
            wrong = good.clone()
            wrong[: sends[0][r]] = inputs[1][sum(sends[1][:r]) :][: sends[0][r]]
            bad["another source's chunk"] = wrong
        for name, output in bad.items():
            assert not torch.equal(output, good), (r, name)
            assert not passes(r, output), (text, n, r, name)


def test_an_all_to_allv_chunk_depends_on_source_destination_and_index() -> None:
    """Chunk d of rank q is filled with its own table (q*n + d): two chunks of equal length
    never hold the same values, even where splits land 8191 elements apart."""
    skew, n = Skew.parse("uniform"), 2
    count = 2 * pattern.PERIOD  # chunks of one whole period: all_to_all's pattern repeats here
    _, (_, inputs, _) = _skewed_outputs(skew, count, n)
    chunks = [c for x in inputs for c in x.split(pattern.PERIOD)]
    assert all(not torch.equal(a, b) for i, a in enumerate(chunks) for b in chunks[:i])
