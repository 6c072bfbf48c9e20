"""A search's parameters as one value (retrieval.engine.params) and the parts a loaded searcher builds once.

- SearchParams checks its own fields (k, query_expansion, alpha, shortlist) when built, and what the index offers
  (scorings, re-rankings, alpha, query expansion) once per search, each refusal a ParamError naming the field;
- the keywords of a Python call and a SearchParams give the same ranked list;
- for every bundled preset, a loaded searcher's verifier is one object, built with the model: no Verifier is
  constructed by searches, box queries, turned queries or the match of a pair.
"""

from __future__ import annotations

import pytest
from helpers import make_pool

from retrieval.app.index import Index
from retrieval.engine.params import Offer, ParamError, SearchParams
from retrieval.engine.presets import load_preset, missing_pieces
from retrieval.rerank import verifier as verifier_module

PRESETS = ["default", "compact", "accurate", "object"]


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    return make_pool(tmp_path_factory.mktemp("params") / "pool", side=200)


@pytest.mark.parametrize(("fields", "param"), [
    ({"k": 0}, "k"), ({"k": 2.5}, "k"), ({"k": True}, "k"), ({"query_expansion": -1}, "query_expansion"),
    ({"alpha": 0}, "alpha"), ({"alpha": float("nan")}, "alpha"), ({"shortlist": 0}, "shortlist"),
    ({"method": 3}, "method"),
])
def test_a_value_refused_when_built_names_its_field(fields, param):
    with pytest.raises(ParamError) as refused:
        SearchParams(**fields)
    assert refused.value.param == param and refused.value.value is next(iter(fields.values()))
    assert refused.value.worded(lambda name: "--flag").startswith("--flag ")


def test_of_replaces_given_fields_and_refuses_unknown_names():
    base = SearchParams(k=5, rerank="none")
    assert SearchParams.of(base, k=7, method=None) == SearchParams(k=7, rerank="none")
    assert SearchParams.of(k=3) == SearchParams(k=3)
    with pytest.raises(TypeError, match="unknown search parameter"):
        SearchParams.of(minimum_similarity=0.2)


def test_resolve_checks_against_the_offer_and_fills_the_presets_defaults():
    from retrieval.engine.config import METHOD_ALPHA, Preset

    search = Preset.from_dict(load_preset("object")).search
    offer = Offer(methods=("l1", "delta1", "asmk"), reranks=("none", "exact", "spatial"), alphas=METHOD_ALPHA)
    r = SearchParams(k=4).resolve(offer, search)
    assert (r.k, r.method, r.rerank, r.alpha) == (4, search.method, search.rerank, search.alpha)
    assert SearchParams(method="asmk").resolve(offer, search).alpha == METHOD_ALPHA["asmk"]   # the scoring's own
    assert SearchParams(method="asmk", alpha=2.0).resolve(offer, search).alpha == 2.0
    assert SearchParams(rerank="none").resolve(offer, search).query_expansion == 0
    for fields, param in (({"method": "cosine"}, "method"), ({"rerank": "geometric"}, "rerank"),
                          ({"rerank": "exact", "query_expansion": 2}, "query_expansion")):
        with pytest.raises(ParamError) as refused:
            SearchParams(**fields).resolve(offer, search)
        assert refused.value.param == param
    glob = Preset.from_dict(load_preset("default")).search
    with pytest.raises(ParamError, match="no alpha") as refused:
        SearchParams(alpha=0.5).resolve(Offer(methods=("ip",), reranks=("none", "spatial")), glob)
    assert refused.value.param == "alpha"


@pytest.mark.parametrize("preset", PRESETS)
def test_a_loaded_searcher_builds_its_verifier_once(tmp_path, pool, preset, monkeypatch):
    if missing_pieces(load_preset(preset)):
        pytest.skip(f"preset {preset!r} needs pieces this installation lacks: {missing_pieces(load_preset(preset))}")
    idx = Index.create(tmp_path / "idx", preset)
    idx.sync(pool[:10])
    searcher = idx.searcher()
    verifier = searcher.verifier
    assert isinstance(verifier, verifier_module.Verifier)
    assert searcher.verifier is verifier and searcher.backend.verifier is verifier
    assert searcher.config is searcher.backend.config   # the preset parsed once, with the model

    built = []
    real_init = verifier_module.Verifier.__init__

    def counted(self, *args, **kwargs):
        built.append(args or kwargs)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(verifier_module.Verifier, "__init__", counted)
    row = next(r for r in idx.catalog.rows() if r["status"] == "indexed")
    box = f"{row['width'] * 0.2:.0f},{row['height'] * 0.2:.0f},{row['width'] * 0.8:.0f},{row['height'] * 0.8:.0f}"
    keywords = idx.search(row["id"], k=4)
    assert [h.to_json() for h in idx.search(row["id"], params=SearchParams(k=4))] == [h.to_json() for h in keywords]
    idx.search(row["id"], bbox=box, k=4)
    idx.search(str(pool[12]), k=4, rerank="none")
    idx.match(row["id"], keywords[-1].id)
    assert built == [], f"searches built {len(built)} Verifier(s)"
    assert idx.searcher() is searcher and searcher.verifier is verifier
    idx.close()


def test_min_similarity_and_verified_only_keep_what_they_say(tmp_path, pool):
    """Of the k best, --min-similarity keeps the verified hits and those of at least that similarity, in their order;
    --verified-only the verified ones; a query with nothing above the cut-off gets an empty list (the command
    line then says so in one line)."""
    idx = Index.create(tmp_path / "idx", "default")
    idx.sync(pool[:12])
    row = next(r for r in idx.catalog.rows() if r["status"] == "indexed")
    every = idx.search(row["id"], k=8)
    assert any(not h.verified for h in every) and any(h.verified for h in every)
    cut = sorted(h.similarity for h in every if not h.verified)[-1]   # the best unverified similarity
    kept = idx.search(row["id"], k=8, min_similarity=cut)
    assert [h.id for h in kept] == [h.id for h in every if h.verified or h.similarity >= cut]
    assert [h.id for h in idx.search(row["id"], k=8, verified_only=True)] == [h.id for h in every if h.verified]
    with pytest.raises(ParamError) as refused:
        idx.search(row["id"], k=8, verified_only=True, rerank="none")
    assert refused.value.param == "verified_only"
    with pytest.raises(ParamError):
        SearchParams(min_similarity=1.5)
    idx.close()


def test_the_command_line_says_when_nothing_is_similar(tmp_path, pool):
    from click.testing import CliRunner

    from retrieval.cli.main import main

    idx = Index.create(tmp_path / "idx", "default")
    idx.sync(pool[:12])
    idx.close()
    res = CliRunner().invoke(main, ["query", str(pool[13]), "--index", str(tmp_path / "idx"), "--rerank", "none",
                                    "--min-similarity", "1"])
    assert res.exit_code == 0, res.output
    assert res.stderr.strip().splitlines()[-1] == ("nothing similar: none of the 10 best hits is verified or of "
                                                   "similarity >= 1.")
    bad = CliRunner().invoke(main, ["query", str(pool[13]), "--index", str(tmp_path / "idx"), "--min-similarity",
                                    "2"])
    assert bad.exit_code == 1 and "--min-similarity 2.0: expected a number from 0 to 1" in bad.output
