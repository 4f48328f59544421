"""The one heatmap drawer (commbench.heatmap): a record in, a matplotlib figure out, read
back off the figure in-process; and the records its three callers build."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from commbench.diagnose.journal import GPU_PAIRS, INTER
from commbench.diagnose.stages import Layout
from commbench.heatmap import Heatmap, draw_heatmap, value_text, write_heatmap


def close(fig: Any) -> None:
    """Nothing to close: the drawer's figures are in no pyplot registry."""


def cell_texts(ax: Any) -> dict[tuple[int, int], tuple[str, str]]:
    """(row, column) -> (text, colour) of every text drawn in a cell."""
    from matplotlib.colors import to_hex

    out = {}
    for t in ax.texts:
        x, y = t.get_position()
        out[(round(y), round(x))] = (t.get_text(), to_hex(t.get_color()))
    return out


def test_the_drawer_draws_the_record() -> None:
    values: list[list[float | None]] = [[None, 200.0], [50.0, None]]
    heatmap = Heatmap(
        values=values,
        row_labels=["cuda:0", "cuda:1"],
        col_labels=["cuda:0", "cuda:1"],
        title="p2p copy bandwidth (sequential)",
        unit="GB/s",
        row_axis="source",
        col_axis="destination",
        annotations=value_text(values, [["", "NV12"], ["PIX", ""]]),
    )
    fig = draw_heatmap(heatmap)
    try:
        fig.draw_without_rendering()
        ax, bar = fig.axes
        assert ax.get_title() == "p2p copy bandwidth (sequential)"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["cuda:0", "cuda:1"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["cuda:0", "cuda:1"]
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("destination", "source")
        assert bar.get_ylabel() == "GB/s"
        (image,) = ax.get_images()
        grid = image.get_array()
        assert grid.mask[0][0] and grid.mask[1][1]  # not measured: blank
        assert (grid[0][1], grid[1][0]) == (200.0, 50.0)
        assert image.get_cmap().name == "viridis"
        # text black on the light (high) end of viridis, white on the dark end
        assert cell_texts(ax) == {(0, 1): ("200\nNV12", "#000000"), (1, 0): ("50\nPIX", "#ffffff")}
    finally:
        close(fig)


def test_no_annotations_no_axis_names_and_a_long_label_stands_upright() -> None:
    heatmap = Heatmap(
        values=[[1.0, 2.0], [2.0, math.nan]],
        row_labels=["a-long-host-name", "b"],
        col_labels=["a-long-host-name", "b"],
        title="t",
    )
    fig = draw_heatmap(heatmap)
    try:
        fig.draw_without_rendering()
        ax = fig.axes[0]
        assert len(ax.texts) == 0 and (ax.get_xlabel(), ax.get_ylabel()) == ("", "")
        assert ax.get_xticklabels()[0].get_rotation() == 90
        assert ax.get_images()[0].get_array().mask[1][1]  # NaN is blank like None
    finally:
        close(fig)


def test_value_text_rounds_and_leaves_missing_cells_empty() -> None:
    assert value_text([[1.4, None], [math.nan, 99.6]]) == [["1", ""], ["", "100"]]
    assert value_text([[3.0]], [["x"]]) == [["3\nx"]]


def test_a_record_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="values are not 2 x 1"):
        Heatmap(values=[[1.0, 2.0]], row_labels=["a", "b"], col_labels=["c"])
    with pytest.raises(ValueError, match="annotations are not 1 x 1"):
        Heatmap(values=[[1.0]], row_labels=["a"], col_labels=["b"], annotations=[])


@pytest.mark.parametrize("name", ["h.png", "h.svg"])
def test_write_heatmap_writes_the_file(tmp_path: Path, name: str) -> None:
    heatmap = Heatmap(values=[[1.0]], row_labels=["a"], col_labels=["a"], title="$\\frac{$")
    path = write_heatmap(heatmap, tmp_path / name)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") if name.endswith("png") else b"<svg" in data


def test_a_diagnosis_builds_a_symmetric_matrix_of_its_units() -> None:
    from commbench.diagnose.heatmap import pair_heatmap

    layout = Layout(hosts=["n0", "n1"], ranks=[[0, 1], [2, 3]])
    gpus = pair_heatmap(GPU_PAIRS, {(0, 1): 10.0, (2, 3): 20.0}, layout)
    assert gpus.row_labels == gpus.col_labels == ["n0:0", "n0:1", "n1:0", "n1:1"]
    assert gpus.values[0][1] == gpus.values[1][0] == 10.0 and gpus.values[0][2] is None
    assert gpus.title == "gpu-pairs: all_reduce bus bandwidth per pair (GB/s, % of the median pair)"
    nodes = pair_heatmap(INTER, {(0, 1): 5.0}, layout)
    assert nodes.row_labels == ["n0", "n1"] and nodes.values == [[None, 5.0], [5.0, None]]


def test_a_small_gap_between_pairs_looks_small() -> None:
    """`diagnose --device cpu --nproc 3` drew 0.66 to 1.2 GB/s as the two ends of the colour
    scale: a gap of 10% looked like night and day. The scale starts at 0, and each cell says
    its value and its share of the median pair."""
    from commbench.diagnose.heatmap import pair_heatmap

    layout = Layout(hosts=["vm"], ranks=[[0, 1, 2]])
    pairs = {(0, 1): 1.0, (0, 2): 1.1, (1, 2): 0.9}
    heatmap = pair_heatmap(GPU_PAIRS, pairs, layout)
    assert heatmap.annotations is not None
    assert heatmap.annotations[1][2] == heatmap.annotations[2][1] == "0.9\n90%"
    assert heatmap.annotations[0][2] == "1.1\n110%" and heatmap.annotations[0][0] == ""
    fig = draw_heatmap(heatmap)
    fig.draw_without_rendering()
    (image,) = fig.axes[0].get_images()
    assert (image.norm.vmin, image.norm.vmax) == (0.0, 1.1)
    # the slowest pair is 82% of the way up the scale, as it is 82% of the fastest
    assert image.norm(0.9) == pytest.approx(0.9 / 1.1)
    assert cell_texts(fig.axes[0])[(1, 2)] == ("0.9\n90%", "#000000")  # light cell: black text


def test_write_heatmaps_names_a_file_per_stage(tmp_path: Path) -> None:
    from commbench.diagnose.heatmap import write_heatmaps

    layout = Layout(hosts=["n0", "n1"], ranks=[[0], [1]])
    assert write_heatmaps(tmp_path, {INTER: {(0, 1): 5.0}}, layout) == ["heatmap-inter-node.png"]
    assert (tmp_path / "heatmap-inter-node.png").read_bytes().startswith(b"\x89PNG")


def test_p2p_matrix_names_each_cells_link() -> None:
    from commbench.p2p.heatmap import matrix_heatmap
    from commbench.results.schema import P2PCopy, ResultRow

    def row(src: int, dst: int, gbps: float) -> ResultRow:
        copy = P2PCopy(
            test="bandwidth", mode="sequential", direction="uni", copy="p2p", src=src, dst=dst
        )
        copy.link = "NV4"
        return ResultRow(
            op="p2p",
            dtype="uint8",
            world_size=2,
            size_bytes=1 << 20,
            count=1 << 20,
            algbw_gbps=gbps,
            busbw_gbps=gbps,
            check="ok",
            p2p=copy,
        )

    heatmap = matrix_heatmap([row(0, 1, 100.0), row(1, 0, 90.0)], 2)
    assert heatmap.title == "p2p copy bandwidth (sequential)" and heatmap.unit == "GB/s"
    assert heatmap.values == [[None, 100.0], [90.0, None]]
    assert heatmap.annotations == [["", "100\nNV4"], ["90\nNV4", ""]]
    assert (heatmap.row_axis, heatmap.col_axis) == ("source", "destination")
