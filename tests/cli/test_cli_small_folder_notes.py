"""A preset fitted to a small folder: ``retrieval index`` says each adjustment once, after the progress lines, in
a person's words; the parameter names and values only with ``-v`` (docs/user-guide.md, "Small collections")."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FEATURE_CACHE
from helpers import make_pool, small_preset

from retrieval.cli.index_notes import SMALL, plain_sentence
from retrieval.cli.main import main

JARGON = ("n_components", "n_words", "PCA", "projection", "aggregation", "preset 'test-small-folder'", "WARNING")


def run(args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """10 photos and a preset whose vocabulary (64 Gaussians) and projection (to 64 dimensions) are too large for
    them: at most 300 training descriptors support at most 30 Gaussians, the projection needs 128 photos."""
    d = tmp_path_factory.mktemp("small")
    pool = make_pool(d / "pool")
    photos = d / "photos"
    photos.mkdir()
    for p in pool[:10]:
        shutil.copy(p, photos)
    preset = small_preset("test-small-folder")
    preset["aggregation"] = {"method": "fisher", "n_components": 64, "alpha": 0.5}
    preset["projection"] = {"n_components": 64, "whiten": False, "renormalize": False}
    preset["training"] = {"max_images": 200, "max_descriptors": 300, "random_state": 0}
    (d / "p.json").write_text(json.dumps(preset))
    return d


def index(folder: Path, name: str, *extra, before=()):
    """``retrieval [BEFORE] index PHOTOS --index NAME ... [EXTRA]`` (a new index NAME trained on the folder)."""
    return run([*before, "index", folder / "photos", "--index", folder / name, "--preset", folder / "p.json",
                "--train-on", "collection", "--feature-store", FEATURE_CACHE, "--workers", "1", *extra])


VOCABULARY = re.compile(re.escape(SMALL) + r"using a smaller vocabulary of (\d+) words \(64 for a large folder\)\.")


def vocabulary_line(lines) -> int:
    """The position of the vocabulary sentence in ``lines`` (exactly one)."""
    at = [i for i, ln in enumerate(lines) if VOCABULARY.fullmatch(ln)]
    assert len(at) == 1, lines
    return at[0]


def words_used(folder: Path, name: str) -> int:
    """The vocabulary size the index's model records (``retrieval info --json``)."""
    info = json.loads(run(["info", "--index", folder / name, "--json"]).stdout)
    return info["model"]["effective"]["aggregation.n_components"]["used"]
FULL_LENGTH = (f"{SMALL}photo descriptions are kept at full length instead of being shortened (that needs at least "
               f"128 photos to learn from).")


def test_plain_sentences_after_the_progress_without_jargon(folder):
    res = index(folder, "plain")
    assert res.exit_code == 0, res.output
    err = res.stderr.splitlines()
    at = vocabulary_line(err)
    assert VOCABULARY.fullmatch(err[at]).group(1) == str(words_used(folder, "plain")) != "64"
    assert err.count(FULL_LENGTH) == 1, res.stderr
    progress = [i for i, ln in enumerate(err) if re.match(r"(hashing|extracting|training|encoding): ", ln)]
    assert progress and at > max(progress) and err.index(FULL_LENGTH) > max(progress)
    for word in JARGON:
        assert word not in res.output, word
    assert "10 images indexed" in res.stdout
    # said once: a second run (nothing to do, no training) says nothing of it
    again = index(folder, "plain")
    assert again.exit_code == 0 and SMALL not in again.output


def test_verbose_adds_the_technical_details(folder):
    res = index(folder, "verbose", "-v")
    assert res.exit_code == 0, res.output
    err = res.stderr.splitlines()
    n = words_used(folder, "verbose")
    assert FULL_LENGTH in err
    assert "projection.n_components = 64 dropped" in res.stderr and "PCA" in res.stderr
    # each detail follows its sentence, after the progress lines
    detail = [i for i, ln in enumerate(err) if f"aggregation.n_components = 64 reduced to {n}:" in ln]
    assert detail == [vocabulary_line(err) + 1], res.stderr


def test_quiet_says_nothing_of_it_and_json_stays_json(folder):
    res = index(folder, "quiet", before=["-q"])
    assert res.exit_code == 0 and res.stderr == "", res.stderr
    res = index(folder, "json", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["added"] == 10
    vocabulary_line(res.stderr.splitlines())


def reductions_in_the_library() -> set[str]:
    """Every parameter the library passes to record_reduction (read from its source)."""
    src = Path(__file__).resolve().parents[2] / "retrieval"
    found = set()
    for f in src.rglob("*.py"):
        found |= set(re.findall(r"record_reduction\([^,]+,\s*[^,]+,\s*\"([a-z_.]+)\"", f.read_text("utf-8")))
    return found


def test_every_reduction_has_its_own_sentence_without_parameter_names():
    params = reductions_in_the_library()
    assert {"projection.n_components", "object_search.n_words", "index.nlist", "index.bits"} <= params
    generic = plain_sentence("no.such", {"preset": 8, "used": 4})
    for param in params:
        for e in ({"preset": 256, "used": 16}, {"preset": 256, "used": None}):
            s = plain_sentence(param, e)
            assert s.startswith(SMALL) and param.split(".")[-1] not in s and "PCA" not in s
        assert plain_sentence(param, {"preset": 256, "used": 16 if param != "projection.n_components" else None}) \
            != generic, param
