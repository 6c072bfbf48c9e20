"""Shared infrastructure: validation messages, persistence format, atomic writes, the reference scan, the CLI frame."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from retrieval._version import __version__
from retrieval.codes.scan import lut_scan_topk
from retrieval.core.checks import (
    NotFittedError,
    check_array,
    check_is_fitted,
    check_random_state,
    check_scalar,
)
from retrieval.core.persistence import FormatError, PersistableMixin, atomic_write, load_estimator


class Toy(PersistableMixin):
    def __init__(self, n_clusters=3, *, alpha=0.5, random_state=None):
        self.n_clusters = n_clusters
        self.alpha = alpha
        self.random_state = random_state

    def fit(self, X):
        self.centers_ = np.asarray(X, np.float32)[: self.n_clusters]
        self.n_iter_ = 7
        return self


def test_check_scalar_message_names_value_and_range():
    with pytest.raises(ValueError, match=r"'n_clusters' parameter of KMeans must be an int in the range \[1, inf\). Got 0"):
        check_scalar(0, "n_clusters", "KMeans", low=1)
    assert check_scalar(5, "n_clusters", "KMeans", low=1) == 5


def test_check_array_rejects_nan_with_context():
    X = np.ones((3, 4), np.float32)
    X[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"descriptors \(img.jpg\) contains 1 NaN"):
        check_array(X, "descriptors", where="img.jpg")
    with pytest.raises(ValueError, match=r"must have 5 columns"):
        check_array(np.ones((3, 4)), n_features=5)


def test_not_fitted():
    with pytest.raises(NotFittedError, match="Toy instance is not fitted"):
        check_is_fitted(Toy(), "centers_")


def test_random_state_is_local():
    state = np.random.get_state()[1].copy()
    a = check_random_state(3).normal(size=4)
    b = check_random_state(3).normal(size=4)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.random.get_state()[1], state)


def test_save_load_round_trip(tmp_path):
    toy = Toy(2, alpha=0.25, random_state=4).fit(np.arange(12).reshape(4, 3))
    path = toy.save(tmp_path / "toy")
    assert path.suffix == ".npz"
    back = Toy.load(path)
    assert back.n_clusters == 2 and back.alpha == 0.25 and back.random_state == 4 and back.n_iter_ == 7
    np.testing.assert_array_equal(back.centers_, toy.centers_)
    with np.load(path, allow_pickle=False) as z:
        header = json.loads(bytes(z["__header__"]).decode())
    assert header["format"] == "retrieval-estimator" and header["library_version"] == __version__
    # loading by the class in the header refuses anything outside the package
    assert isinstance(load_estimator(path), Toy) if Toy.__module__.startswith("retrieval.") else True


def test_load_rejects_foreign_files(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(3))
    with pytest.raises(FormatError, match="no __header__"):
        Toy.load(bad)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(FormatError, match="cannot read"):
        Toy.load(tmp_path / "junk.npz")


def test_atomic_write_keeps_old_file_on_error(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_write(p) as fh:
            fh.write(b"partial")
            raise RuntimeError("crash")
    assert p.read_bytes() == b"old"
    assert [x.name for x in tmp_path.iterdir()] == ["f.bin"]


def test_reference_scan_matches_brute_force():
    rng = np.random.default_rng(0)
    tables = rng.random((3, 4, 16), dtype=np.float32)
    codes = rng.integers(0, 16, size=(50, 4), dtype=np.uint8)
    D, I = lut_scan_topk(tables, codes, 5)
    for q in range(3):
        full = tables[q][np.arange(4), codes].sum(1)
        np.testing.assert_array_equal(I[q], np.argsort(full, kind="stable")[:5])
        np.testing.assert_allclose(D[q], np.sort(full)[:5], rtol=1e-6)
    D, I = lut_scan_topk(tables, codes[:2], 5)
    assert (I[:, 2:] == -1).all() and np.isinf(D[:, 2:]).all()


def test_cli_version_and_help():
    from retrieval.cli.main import main

    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0 and "bench" in r.output and "eval" in r.output
