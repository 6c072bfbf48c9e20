"""Library errors raised inside ``retrieval bench`` / ``train`` commands are one ``Error:`` line, not a traceback."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from retrieval.cli.main import main


def test_bench_akm_bad_file_is_one_line(tmp_path):
    path = tmp_path / "few.npy"
    np.save(path, np.zeros((10, 4), np.float32))
    r = CliRunner().invoke(main, ["bench", "akm", str(path)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.strip().splitlines() == [f"Error: {path}: expected a 2-d array (n, d) with more than 3000 rows "
                                             f"(the held-out ones); got shape (10, 4)."]


def test_train_akm_bad_shape_is_one_line(tmp_path):
    path = tmp_path / "flat.npy"
    np.save(path, np.zeros(10, np.float32))
    r = CliRunner().invoke(main, ["train", "akm", str(path), "--words", "4", "--out", str(tmp_path / "v.npz")])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1 and "2-d array" in r.output


def test_bench_app_without_input_is_a_usage_error():
    r = CliRunner().invoke(main, ["bench", "app"])
    assert r.exit_code == 2 and "--minibench FILE and/or --n N" in r.output


def test_bench_kernels_unknown_part_is_one_line():
    r = CliRunner().invoke(main, ["bench", "kernels", "--parts", "recall,nope"])
    assert r.exit_code == 1 and "unknown part 'nope'" in r.output and "Traceback" not in r.output
