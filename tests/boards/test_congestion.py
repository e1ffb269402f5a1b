"""boards.congestion on a small heatmap written as nextpnr's router2 writes them."""

import numpy as np
import pytest

from boards import congestion


def write_heatmap(directory, iteration, grid, nets):
    directory.mkdir(exist_ok=True)
    (directory / f"_congestion_by_coordinate_{iteration}.csv").write_text(
        "".join(",".join(str(v) for v in row) + ",\n" for row in grid))
    (directory / f"_congestion_by_net_{iteration}.csv").write_text(
        "".join(f"{net},{count}\n" for net, count in nets))


NETS = [("top.engine.lookup.pooler.acc[3]", 5),
        ("top.engine.lookup.pooler.acc_TRELLIS_FF_Q_DI_LUT4_Z[1]", 2),
        ("top.engine.lookup.lines__payload$116[141]", 4),
        ("top.engine.update.router.level", 1)]


@pytest.mark.parametrize(("net", "module"), [
    ("top.engine.lookup.lines__payload$116[141]", "top.engine.lookup.lines__payload"),
    ("top.a.b$266_TRELLIS_FF_Q_DI", "top.a.b"),
    ("top.a.c_LUT4_Z_C[1].d.e", "top.a.c.d"),
    ("top.a", "top.a"),
])
def test_module_of_removes_derived_suffixes(net, module):
    assert congestion.module_of(net, 4) == module


def test_reads_iterations_grid_and_modules(tmp_path, capsys):
    heat = tmp_path / "heat"
    write_heatmap(heat, 1, [[0, 1], [2, 3], [0, 0]], NETS)
    write_heatmap(heat, 12, [[0, 0], [1, 0], [0, 0]], NETS[:1])
    prefix = f"{heat}/"
    assert congestion.heatmap_iterations(prefix) == [1, 12]
    assert congestion.load_grid(prefix, 1).tolist() == [[0, 1], [2, 3], [0, 0]]
    assert congestion.congestion_by_module(prefix, 1, depth=4) == {
        "top.engine.lookup.pooler": (7, 2), "top.engine.lookup.lines__payload": (4, 1),
        "top.engine.update.router": (1, 1)}

    png = tmp_path / "grid.png"
    assert congestion.main([prefix, "--iteration", "1", "--depth", "3", "--png",
                            str(png)]) == 0
    out = capsys.readouterr().out
    assert "iteration 1: 6 overused wires in 3 x 2 tiles; the hottest tile has 3" in out
    assert "| `top.engine.lookup` | 11 | 91.7% | 3 |" in out
    assert png.stat().st_size > 0
    assert congestion.main([prefix]) == 0
    assert capsys.readouterr().out.startswith("iteration 12: 1 overused wires")


def test_missing_heatmaps_are_reported(tmp_path, capsys):
    assert congestion.main([f"{tmp_path}/"]) == 2
    assert "no router2 heatmap under" in capsys.readouterr().err
    write_heatmap(tmp_path / "heat", 3, [[1]], NETS[:1])
    assert congestion.main([f"{tmp_path}/heat/", "--iteration", "4"]) == 2
    error = capsys.readouterr().err
    assert "no iteration 4 under" in error and "there are 3..3" in error


def test_grid_is_integer(tmp_path):
    write_heatmap(tmp_path / "h", 2, [[1, 2]], NETS)
    assert congestion.load_grid(f"{tmp_path}/h/", 2).dtype == np.int64
