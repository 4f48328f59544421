"""The GPU memory preflights: free memory (not total) per GPU that holds buffers, less a
stated reserve; 2 x size on one GPU for a copy within it or a bidirectional pair. The
(free, total) numbers are given, as `torch.cuda.mem_get_info` would report them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.collectives.settings import CollectivesSettings
from commbench.errors import UserError
from commbench.gpu_memory import COLLECTIVES_RESERVE, P2P_RESERVE, shortfall
from commbench.launch import launcher
from commbench.launch.preflight import buffer_gpus, check_resources
from commbench.p2p.plan import BI, Copy, Step, gpu_buffer_bytes
from tests.factories import collectives_settings, cpu_gpus_for_p2p

G = 1 << 30
M = 1 << 20


def test_shortfall_is_need_plus_reserve_against_free_memory() -> None:
    need = {0: 3 * G, 1: 3 * G}
    assert shortfall(need, {0: (80 * G, 80 * G), 1: (5 * G, 80 * G)}, 2 * G) is None
    assert shortfall(need, {0: (80 * G, 80 * G), 1: (5 * G - 1, 80 * G)}, 2 * G) == (
        1,
        3 * G,
        5 * G - 1,
        80 * G,
    )
    # the first GPU by ordinal is named; a GPU whose memory is unknown is not refused
    assert shortfall({2: G, 1: G}, {1: (G, G), 2: (G, G)}, 1)[0] == 1  # type: ignore[index]
    assert shortfall({0: 100 * G}, {}, 0) is None


def cuda_settings(**kw: Any) -> CollectivesSettings:
    base: dict[str, Any] = dict(
        ops=["all_reduce"], sizes=[1024, G], nproc=4, backend="nccl", device="cuda"
    )
    base.update(kw)
    return collectives_settings(**base)


def probe_info(*free_total: tuple[int, int]) -> dict[str, Any]:
    return {
        "ok": True,
        "device_count": len(free_total),
        "memory": {str(i): list(ft) for i, ft in enumerate(free_total)},
    }


def test_collectives_use_each_gpus_free_memory_not_gpu_0s_total() -> None:
    roomy = (80 * G, 80 * G)
    busy = (3 * G + COLLECTIVES_RESERVE - 1, 80 * G)  # most of GPU 2 taken by another process
    with pytest.raises(UserError) as err:
        check_resources(cuda_settings(), probe_info(roomy, roomy, busy, roomy))
    assert str(err.value) == (
        "--sizes up to 1G (3 buffers per rank) needs about 3.0G on GPU 2 plus 2.0G kept free "
        "(CUDA context, NCCL buffers, check temporaries), more than its 5.0G free of 80.0G"
    )
    check_resources(cuda_settings(), probe_info(roomy, roomy, (5 * G, 80 * G), roomy))
    # a subgroup's buffers live on its members' GPUs only
    check_resources(cuda_settings(ranks=[3, 0]), probe_info(roomy, roomy, busy, roomy))
    assert buffer_gpus(cuda_settings(ranks=[5, 0], nproc=4)) == [0, 1]
    assert (
        buffer_gpus(
            collectives_settings(
                ops=["all_reduce"], sizes=[4], nproc=2, backend="gloo", device="cpu"
            )
        )
        == []
    )


def test_an_oversized_collectives_request_is_one_line_before_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_launch(*args: object, **kw: object) -> None:
        raise AssertionError("launched")

    monkeypatch.setattr(launcher, "probe", lambda s: probe_info((7 * G, 16 * G), (7 * G, 16 * G)))
    monkeypatch.setattr(launcher.subprocess, "Popen", no_launch)
    result = CliRunner().invoke(
        app,
        ["collectives", "--device", "cuda", "--backend", "nccl", "--nproc", "2", "--sizes", "2G"],
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("commbench: error: --sizes up to 2G (3 buffers per rank) ")
    assert result.stderr.count("\n") == 1 and "more than its 7.0G free of 16.0G" in result.stderr
    assert not Path("results").exists()


# --- p2p -------------------------------------------------------------------------------------


def step(*copies: Copy, size: int = G, direction: str = "uni") -> Step:
    return Step(
        test="bandwidth", mode="concurrent", direction=direction, size_bytes=size, copies=copies
    )


def test_p2p_counts_source_and_destination_on_one_gpu() -> None:
    assert gpu_buffer_bytes([step(Copy(0, 0))]) == {0: 2 * G}  # within one GPU
    assert gpu_buffer_bytes([step(Copy(0, 1))]) == {0: G, 1: G}
    assert gpu_buffer_bytes([step(Copy(0, 1), Copy(1, 0), direction=BI)]) == {0: 2 * G, 1: 2 * G}
    assert gpu_buffer_bytes([step(Copy(None, 0)), step(Copy(0, None))]) == {0: 2 * G}
    # a fan-in holds a destination per copy; buffers of a size persist across its steps, not
    # across sizes
    fan = step(Copy(1, 0), Copy(2, 0), Copy(3, 0))
    assert gpu_buffer_bytes([fan, step(Copy(0, 1), size=4 * G)])[0] == 4 * G
    assert gpu_buffer_bytes([fan, step(Copy(0, 1))])[0] == 4 * G


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(free: int, total: int) -> None:
        cpu_gpus_for_p2p(monkeypatch, 1, memory={0: (free, total)})

    return install


def test_p2p_within_one_gpu_needs_twice_the_size_free(one_gpu: Any) -> None:
    one_gpu(free=2 * 64 * M + P2P_RESERVE - 1, total=G)
    result = CliRunner().invoke(app, ["p2p", "--size", "64M", "--iters", "2", "--warmup", "1"])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "commbench: error: --size 64M (copy sources and destinations) needs about 128.0M on "
        "GPU 0 plus 512.0M kept free (pattern and verification temporaries, peer mappings), "
        "more than its 640.0M free of 1.0G\n"
    )
    assert not Path("results").exists()


@pytest.mark.integration
def test_p2p_that_fits_runs(one_gpu: Any) -> None:
    one_gpu(free=2 * 64 * M + P2P_RESERVE, total=G)
    result = CliRunner().invoke(app, ["p2p", "--size", "64M", "--iters", "2", "--warmup", "1"])
    assert result.exit_code == 0, result.output


# --- on a GPU: the numbers come from torch.cuda.mem_get_info --------------------------------


@pytest.mark.gpu
def test_a_request_past_free_memory_is_refused_on_a_real_gpu() -> None:
    import torch

    _, total = torch.cuda.mem_get_info(0)
    half = str(total // 2 // 4 * 4)  # 3 buffers (collectives) or 2 (d2d) of it cannot fit
    result = CliRunner().invoke(
        app, ["collectives", "--nproc", "1", "--ops", "all_reduce", "--sizes", half]
    )
    assert result.exit_code == 2 and "free of" in result.stderr, result.output
    # one GPU: a copy within it holds 2 x half; more: a bidirectional pair holds 2 x half on each
    both = ["--bidirectional"] if torch.cuda.device_count() > 1 else []
    result = CliRunner().invoke(app, ["p2p", "--src", "0", "--size", half, *both])
    assert result.exit_code == 2 and "free of" in result.stderr, result.output
    assert not Path("results").exists()
