"""The shape of the package: layers and acyclic modules (import-linter), a cheap ``import retrieval``, a package root
with nothing but ``__init__`` and the version, modules of at most 500 lines, and citations a reader can resolve."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "retrieval"
HEAVY = ("numba", "cv2", "pyhesaff", "cyvlfeat", "faiss", "sklearn", "skimage")


def test_import_linter_contracts_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    exe = str(exe) if exe.exists() else shutil.which("lint-imports")
    assert exe, "lint-imports not found: `make setup` installs import-linter (the dev extra)"
    res = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


@pytest.mark.parametrize("module", ["retrieval", "retrieval.features", "retrieval.cli.main"])
def test_import_is_cheap(module):
    """Importing the package (or the CLI, for a fast ``--help``) loads none of the heavy optional modules."""
    code = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"`import {module}` imported {res.stdout.strip()}"


def test_searching_an_inverted_file_does_not_import_scipy_sparse():
    """A new process's first answer does not pay for scipy.sparse (0.2 s) unless something gives it a sparse
    matrix: the inverted-file modules recognise one without importing it (retrieval.core.checks.is_sparse)."""
    code = ("import sys, retrieval.search.invfile, retrieval.search.postings, retrieval.search.smk; "
            "from retrieval.core.checks import is_sparse; import numpy as np; "
            "print(is_sparse(np.zeros(2)), 'scipy.sparse' in sys.modules); "
            "import scipy.sparse as sp; print(is_sparse(sp.csr_matrix(np.eye(2))), is_sparse(np.eye(2)))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False", "True", "False"]


def test_package_root_holds_only_init_and_version():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert modules == ["__init__.py", "_version.py"]


def test_no_module_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}


def _text_files():
    yield ROOT / "README.md"
    yield from PACKAGE.rglob("*.py")
    yield from (ROOT / "docs").glob("*.md")


@pytest.mark.parametrize("pattern", [r"[Ss]eeds? 00[0-4]", r"\b[Ii]ssues? #?\d+", r"retrieval-heavy\.lock"])
def test_citations_resolvable_and_no_internal_labels(pattern):
    """Papers are cited by authors and year (docs/references.md), never by an internal file label; no issue
    numbers and no developer-machine paths in the code, the README or the docs (docs/history/ excepted)."""
    rx = re.compile(pattern)
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in _text_files()
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if rx.search(line)]
    assert hits == []


def test_a_new_query_process_loads_no_numba_until_its_second_search(cli_world):
    """`retrieval query` in a new process (extraction, encoding, search, the spatial verification of thumbnails)
    answers without loading numba, whose
    start-up (about half a second) would otherwise be most of a first answer's fixed cost; the process's second
    search loads the compiled search kernels (retrieval.app.searcher) and ranks alike."""
    photo = cli_world["pool"][0]
    assert (Path(cli_world["index"]) / "model" / "match_cells.npz").exists()   # the verifier has match cells
    code = ("import sys, json\nfrom retrieval.cli.main import main\nfrom retrieval.app.index import Index\n"
            f"main(['query', {str(photo)!r}, '--index', {cli_world['index']!r}, '--format', 'json', "
            "'--rerank', 'spatial', '--qe', '1'], standalone_mode=False)\n"
            "print('numba' in sys.modules, file=sys.stderr)\n"
            f"hits = Index.open({cli_world['index']!r}).search({str(photo)!r}, rerank='spatial', "
            "query_expansion=1)\n"
            "print('numba' in sys.modules, 'retrieval.search._ivfadc_kernels' in sys.modules, file=sys.stderr)\n"
            "print(json.dumps([[h.id, round(h.score, 6)] for h in hits]), file=sys.stderr)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    first = json.loads(res.stdout)
    lines = res.stderr.strip().splitlines()
    assert lines[-3] == "False", "the first search of a process imported numba"
    assert lines[-2] == "True True", "the second search of a process did not load the compiled kernels"
    second = json.loads(lines[-1])
    assert [[h["id"], h["score"]] for h in first] == second
