"""Rows as they are measured: a line per point in logs, a growing table on a terminal, the ETA;
and through the CLI on a real 2-rank CPU run, with stdout left to --format."""

from __future__ import annotations

import io
import json
import re

import pytest
from typer.testing import CliRunner

from commbench.cli import app
from commbench.cli.live import LiveRows, clock, eta, progress_text
from commbench.results.schema import ResultRow
from tests.factories import make_row


def _row(size: int, op: str = "all_reduce") -> ResultRow:
    return make_row(size, [100.0, 110.0, 120.0, 130.0, 140.0], op=op)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_clock_and_eta() -> None:
    assert [clock(s) for s in (0, 5.4, 65, 3723)] == ["0:00", "0:05", "1:05", "1:02:03"]
    assert eta(10.0, 1, 10) is None  # the first point carries the start-up: nothing to go by
    assert eta(10.0, 3, 10) == pytest.approx(35.0)  # 5 s a point after the first, 7 left
    assert progress_text(65, 3, 24, since_first=10) == "[ 3/24 1:05 eta 1:45]"
    assert progress_text(65, 24, 24, since_first=60) == "[24/24 1:05]"


def test_a_log_gets_one_flushed_line_per_point_in_order() -> None:
    now = FakeClock()
    stream = io.StringIO()
    with LiveRows(stream=stream, terminal=False, now=now) as live:
        live(0, 3, None)  # the workers are starting: nothing to show yet
        assert stream.getvalue() == ""
        for done, size in enumerate((1024, 4096, 1 << 20), start=1):
            now.t += 2
            live(done, 3, _row(size))
            assert len(stream.getvalue().splitlines()) == done  # written at once, not at the end
    lines = stream.getvalue().splitlines()
    assert [ln.split("]")[0] for ln in lines] == [
        "commbench: [1/3 0:02",
        "commbench: [2/3 0:04 eta 0:02",
        "commbench: [3/3 0:06",
    ]
    assert "all_reduce float32 op=sum 2 ranks  1K  time 120.00 us  busbw 0.0085 GB/s" in lines[0]
    assert "1M" in lines[2] and "spread" in lines[2] and lines[2].endswith("ok")
    assert not any(re.search(r"\de-\d", ln) for ln in lines)


def test_a_terminal_sees_the_table_grow_under_a_progress_line() -> None:
    now = FakeClock()
    stream = io.StringIO()
    live = LiveRows(stream=stream, terminal=True, now=now)
    live(0, 4, None)
    assert "starting workers" in live.status()
    live(1, 4, _row(1024))
    now.t += 3
    live(2, 4, _row(4096))
    from rich.console import Console

    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(live)
    view = console.file.getvalue()  # type: ignore[attr-defined]
    assert "# all_reduce  float32  op=sum  2 ranks" in view
    assert view.index(" 1K ") < view.index(" 4K ") < view.index("[2/4 0:03 eta 0:06]")
    assert "##########----------" in view
    # a terminal narrower than the table: each row is cut, never wrapped onto a next line
    narrow = Console(file=io.StringIO(), width=40, color_system=None)
    narrow.print(live)
    shown = narrow.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert all(len(line) <= 40 for line in shown)
    assert [line.split()[0] for line in shown if line.lstrip().startswith(("1K", "4K"))] == [
        "1K",
        "4K",
    ]
    assert len(shown) == len(view.splitlines())  # as many lines as at full width


@pytest.mark.integration
def test_cli_streams_each_point_on_stderr_and_keeps_json_strict() -> None:
    result = CliRunner().invoke(
        app,
        [
            "collectives", "--device", "cpu", "--nproc", "2", "--ops", "all_reduce,broadcast",
            "--sizes", "1K,16K", "--iters", "3", "--warmup", "1", "--no-plot", "-f", "json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # stdout holds the JSON alone
    assert len(data["rows"]) == 4
    streamed = [ln for ln in result.stderr.splitlines() if re.match(r"commbench: \[\d/4 ", ln)]
    assert [re.match(r"commbench: \[(\d)/4", ln).group(1) for ln in streamed] == list("1234")  # type: ignore[union-attr]
    order = [(ln.split("]")[1].split()[0], ln.split("  ")[1]) for ln in streamed]
    assert order == [
        ("all_reduce", "1K"),
        ("all_reduce", "16K"),
        ("broadcast", "1K"),
        ("broadcast", "16K"),
    ]
    assert "eta" in streamed[1]
    assert "complete: 4/4 points" in result.stderr.splitlines()[-1]


@pytest.mark.integration
def test_cli_table_ends_with_the_devices_and_the_bandwidth_summary() -> None:
    result = CliRunner().invoke(
        app,
        [
            "collectives", "--device", "cpu", "--nproc", "2", "--ops", "all_gather",
            "--sizes", "4K,64K", "--iters", "3", "--warmup", "1", "--no-plot",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.index("# all_gather  float32  2 ranks") < out.index("# Using devices")
    assert out.index("# Using devices") < out.index("# Bus bandwidth: peak, and average")
    header = out.splitlines()[1].split()
    assert header == [
        "size",
        "count",
        "time_us",
        "algbw_GB/s",
        "busbw_GB/s",
        "spread",
        "iters",
        "check",
    ]
    assert re.search(r"^\s+0\s+\S+\s+cpu\s+cpu$", out, re.M)
    assert re.search(r"^all_gather float32 2 ranks\s+\d+\.\d+\s+(4K|64K)\s+\d+\.\d+", out, re.M)
    assert "n=2" not in out and not re.search(r"\de-\d", out)
