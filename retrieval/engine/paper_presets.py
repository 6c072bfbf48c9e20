"""The papers' settings as presets (``retrieval/data/presets/paper-*.json``) and the figures they report.

Regenerate the files with ``python -m retrieval.engine.paper_presets``. One preset per table row; the swept
parameter of the row is set at run time with ``retrieval eval run ... --set KEY=VALUE`` (strict: an unknown key is
refused, naming the closest valid one), e.g. ``--set projection.n_components=512`` (D' of Jegou et al. 2012, Table I), ``--set projection=null``
(D' = D), ``--set index.bits=64`` and ``--set search.method=lower_bound`` (Gordo et al. 2014, Fig. 9),
``--set search.method=delta2`` (Zhu et al. 2013).

Every preset carries a ``paper`` block: the seed, table/figure, row, and the published figures (as printed in the
seed texts; OCR'd tables were read cell by cell). The papers do no spatial re-ranking in these tables, so the presets
set ``search.rerank = "none"`` unless the row says otherwise.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

from retrieval.core.checks import ParamError

FEATURES = {"detector": "hesaff", "max_side": 1024}
TRAINING = {"max_images": 5000, "max_descriptors": 1000000, "random_state": 0}

# Jegou et al. 2012, Table I: Holidays mAP for D' = D, 2048, 512, 128, 64, 32 (None: not applicable, D' >= D)
TABLE_I = {
    ("bow", 1000): [40.1, None, 43.5, 44.4, 43.4, 40.8],
    ("bow", 20000): [43.7, 41.8, 44.9, 45.2, 44.4, 41.8],
    ("fisher", 16): [54.0, None, 54.6, 52.3, 49.9, 46.6],
    ("fisher", 64): [59.5, 60.7, 61.0, 56.5, 52.0, 48.0],
    ("fisher", 256): [62.5, 62.6, 57.0, 53.8, 50.6, 48.6],
    ("vlad", 16): [52.0, None, 52.7, 52.6, 50.5, 47.7],
    ("vlad", 64): [55.6, 57.6, 59.8, 55.7, 52.3, 48.4],
    ("vlad", 256): [58.7, 62.1, 56.7, 54.2, 51.3, 48.1],
}
D_PRIME = ["D", 2048, 512, 128, 64, 32]

# Jegou et al. 2012, Table II (raw D | D'=128): UKB 4 x recall@4, Holidays / Oxford / Oxford learned on Paris mAP
TABLE_II = {
    ("bow", 200000): {"ukb": [2.81, None], "holidays": [54.0, None], "oxford": [36.4, None],
                      "oxford_paris_vocabulary": [None, None]},
    ("bow", 20000): {"ukb": [2.87, 2.95], "holidays": [43.7, 45.2], "oxford": [31.9, 15.9],
                     "oxford_paris_vocabulary": [35.4, 19.4]},
    ("fisher", 64): {"ukb": [3.35, 3.33], "holidays": [59.5, 56.5], "oxford": [31.7, 24.3],
                     "oxford_paris_vocabulary": [41.8, 30.1]},
    ("vlad", 64): {"ukb": [3.28, 3.35], "holidays": [55.6, 55.7], "oxford": [30.4, 25.7],
                   "oxford_paris_vocabulary": [37.8, 28.7]},
}

# Jegou et al. 2012, Table III: bytes per image, UKB (score / 4 scale as printed: 4 x recall@4), Holidays mAP
TABLE_III = {
    "fisher64-adc16x8": {"agg": ("fisher", 64), "d": 96, "M": 16, "nbits": 8, "bytes": 16, "ukb": 3.10,
                         "holidays": 50.6},
    "fisher256-adc256x10": {"agg": ("fisher", 256), "d": 2048, "M": 256, "nbits": 10, "bytes": 320, "ukb": 3.47,
                            "holidays": 63.4},
    "vlad16-adc16x8": {"agg": ("vlad", 16), "d": 128, "M": 16, "nbits": 8, "bytes": 16, "ukb": 2.88,
                       "holidays": 46.0},
    "vlad64-adc32x10": {"agg": ("vlad", 64), "d": 128, "M": 32, "nbits": 10, "bytes": 40, "ukb": 3.10,
                        "holidays": 49.5},
}

# Zhu et al. 2013, Tables 5-6: Oxford105K / Oxford105K* (vocabulary learnt on Paris) mAP
TABLE_5 = {"selected (soft, l1)": [73.88, 54.47], "different assignment (hard, l1)": [70.93, 48.95],
           "different distance (soft, l2)": [70.03, 51.07], "with re-ranking": [76.59, 71.82]}
TABLE_6 = {"best l_p": [73.88, 54.47], "best delta_p": [78.14, 61.05], "Best_1": [62.2, 34.3],
           "Best_2": [89.1, 77.2]}


def _global(name, description, agg, k, *, projection=128, index=None, paper=None, requires=(), version=1):
    return {
        "name": name, "version": version, "kind": "global", "description": description,
        "requires": ["retrieval.features:FeatureExtractor", "retrieval.features:root_sift",
                     "retrieval.features.pca:LocalPCA", *requires],
        "features": dict(FEATURES),
        # BoW: the paper quantises the full SIFT; a 128-component PCA is only a rotation (k-means is invariant)
        "local_pca": {"n_components": 128 if agg == "bow" else 64, "whiten": False},
        "aggregation": ({"method": "bow", "n_components": k, "alpha": 1.0, "idf": True} if agg == "bow" else
                        {"method": agg, "n_components": k, "alpha": 0.5}),
        "projection": None if projection is None else {"n_components": projection, "whiten": False,
                                                       "renormalize": False},
        "index": index or {"type": "flat"},
        "training": dict(TRAINING),
        "search": {"method": "ip", "rerank": "none", "shortlist": 50, "min_inliers": 9, "ratio": 0.85},
        "paper": paper or {},
    }


def build() -> dict:
    """All paper presets as ``{name: preset}``."""
    out = {}
    agg_class = {"bow": "BoW", "fisher": "FisherVector", "vlad": "VLAD"}
    for (agg, k), row in TABLE_I.items():
        name = f"paper-002-{agg}{k // 1000}k" if agg == "bow" else f"paper-002-{agg}{k}"
        paper = {"seed": "002", "table": "I", "row": f"{agg_class[agg]} K={k}", "dataset": "holidays",
                 "metric": "mAP (%)", "figures": {str(d): v for d, v in zip(D_PRIME, row, strict=True)
                                                  if v is not None},
                 "sweep": "projection.n_components=D' (or projection=null for D'=D)"}
        if (agg, k) in TABLE_II:
            paper["table_II"] = TABLE_II[(agg, k)]
        desc = (f"Jegou et al. 2012, Table I row {agg_class[agg]} K={k}: "
                + ("RootSIFT (the paper: SIFT) BoW histogram, idf, L2 (Sec. II-A)" if agg == "bow" else
                   "RootSIFT-PCA64, " + ("Fisher vector (eq. 6)" if agg == "fisher" else "VLAD (eq. 18)")
                   + ", power 0.5 + L2 (eq. 7)")
                + ", PCA to D' = 128 by default, exhaustive search, no re-ranking.")
        out[name] = _global(name, desc, agg, k, paper=paper, requires=[f"retrieval.aggregation:{agg_class[agg]}"])
    out["paper-002-bow200k"] = _global(
        "paper-002-bow200k", "Jegou et al. 2012, Table II: BoW with a 200k-word vocabulary, raw (no PCA), exhaustive.",
        "bow", 200000, projection=None, requires=["retrieval.aggregation:BoW"],
        paper={"seed": "002", "table": "II", "row": "BOW 200k", "table_II": TABLE_II[("bow", 200000)]})
    # 200k words need 2M training descriptors (10 per word, training.min_descriptors_per_word)
    out["paper-002-bow200k"]["training"]["max_descriptors"] = 2_000_000
    out["paper-002-bow200k"]["training"]["min_descriptors_per_word"] = 10
    for key, t in TABLE_III.items():
        agg, k = t["agg"]
        name = f"paper-002-{key}"
        out[name] = _global(
            name, f"Jegou et al. 2012, Table III: {agg_class[agg]} K={k}, PCA to D'={t['d']} + random rotation, ADC "
                  f"{t['M']}x{t['nbits']} (eq. 21-23), {t['bytes']} bytes per image, ranked by ADC distance.",
            agg, k, projection=t["d"], requires=[f"retrieval.aggregation:{agg_class[agg]}",
                                                 "retrieval.codes:ProductQuantizer"],
            index={"type": "adc", "M": t["M"], "nbits": t["nbits"], "rotation": True},
            # version 2: the random rotation is the library's one rule (retrieval.core.pca.random_rotation, the
            # polar factor of a Gaussian matrix; version 1 used its QR factor), so a seed gives another rotation
            version=2,
            paper={"seed": "002", "table": "III", "row": key, "bytes": t["bytes"],
                   "figures": {"ukb": t["ukb"], "holidays": t["holidays"]}})
    out["paper-002-ivfadc"] = _global(
        "paper-002-ivfadc", "Jegou et al. 2012, Sec. VI-C / Fig. 6: Fisher K=64, PCA to D'=96 + rotation, IVFADC with 8192 "
                            "lists of which 64 are visited, 16x8 codes + 4-byte ids, ranked by ADC distance.",
        "fisher", 64, projection=96, requires=["retrieval.aggregation:FisherVector", "retrieval.search.ivfadc:IVFADC"],
        index={"type": "ivfadc_adc", "nlist": 8192, "nprobe": 64, "M": 16, "nbits": 8, "min_images": 0},
        paper={"seed": "002", "figure": "6", "row": "IVFADC 64/8192, Holidays + Flickr distractors",
               "figures": {}})
    for emb in ("LSH", "LSBC", "SH", "PCAE", "PCAERR", "PCAEITQ"):
        name = f"paper-000-{emb.lower()}"
        p = _global(name, f"Gordo et al. 2014, Fig. 9: Fisher vector (K=64, 4096-d), {emb} binary embedding of 128 bits; "
                          "distance hamming (symmetric), expectation (d_E, eq. 21-26) or lower_bound (d_LB, "
                          "eq. 30-33) via --set search.method=...; bits via --set index.bits=32..512.",
                    "fisher", 64, projection=None, requires=["retrieval.aggregation:FisherVector",
                                                             f"retrieval.codes.binary:{emb}"],
                    paper={"seed": "000", "figure": "9", "row": emb, "dataset": "holidays",
                           "figures": ({"text": "SH at 128 bits: asymmetric +8 points mAP (+21 % relative) over "
                                                "Hamming"} if emb == "SH" else {}),
                           "sweep": "index.bits={32,64,128,256,512}, search.method="
                                    "{hamming,expectation,lower_bound}"})
        p["kind"] = "binary"
        p["index"] = {"type": "binary", "embedding": emb, "bits": 128, "distance": "hamming"}
        p["search"] = {"method": "hamming", "rerank": "none", "shortlist": 50, "min_inliers": 9, "ratio": 0.85}
        out[name] = p
    for key, method, assignment, rerank, row in (
        ("l1-soft", "l1", "soft", "none", "selected (soft, l1)"),
        ("l1-hard", "l1", "hard", "none", "different assignment (hard, l1)"),
        ("l2-soft", "l2", "soft", "none", "different distance (soft, l2)"),
        ("l1-soft-spatial", "l1", "soft", "spatial", "with re-ranking"),
        ("delta1", "delta1", "soft", "none", "best delta_p"),
        ("delta2", "delta2", "soft", "none", "delta_2"),
    ):
        name = f"paper-003-{key}"
        figs = TABLE_5.get(row) or TABLE_6.get(row)
        out[name] = {
            "name": name, "version": 1, "kind": "object",
            "description": f"Zhu et al. 2013, Tables 5-6 ({row}): RootSIFT, 1M-word vocabulary (approximate k-means), "
                           f"{assignment} assignment, idf, {method}"
                           + (" with alpha = 0.5 (eq. 8-9)" if method == "delta1" else "")
                           + (" (eq. 10-11)" if method == "delta2" else "")
                           + f", re-ranking: {rerank}; object queries by box.",
            "requires": ["retrieval.features:FeatureExtractor", "retrieval.engine.object.searcher:ObjectSearcher"],
            "features": dict(FEATURES),
            "object_search": {"n_words": 1000000, "assignment": assignment, "idf": True, "rootsift": True},
            "training": {"max_images": 5000, "max_descriptors": 5000000, "random_state": 0},
            "search": {"method": method, "alpha": 0.5 if method != "delta2" else 1000.0, "rerank": rerank,
                       "shortlist": 200},
            "paper": {"seed": "003", "table": "5" if row in TABLE_5 else "6", "row": row, "dataset": "oxford105k",
                      "figures": {} if figs is None else {"oxford105k": figs[0], "oxford105k_paris_vocabulary":
                                                          figs[1]}},
        }
    return out


def main(argv=None) -> int:
    target = Path(__file__).resolve().parents[1] / "data" / "presets"
    for name, preset in build().items():
        (target / f"{name}.json").write_text(json.dumps(preset, indent=2) + "\n", encoding="utf-8")
    return 0


def apply_overrides(preset: dict, assignments) -> dict:
    """A copy of ``preset`` with ``KEY=VALUE`` assignments applied (``a.b.c`` paths, JSON values).

    Strict: the result is parsed by :meth:`retrieval.engine.config.Preset.from_dict`, so an unknown or misspelled
    key is an error naming the closest valid one, and an out-of-range value is refused. A declared key the preset
    does not set (its default applies) may be set; a ``null`` section may be replaced by an object but not set
    key by key; inside free-form objects (``paper``, ``object_search.vocabulary_params``) the key must exist.
    Values are parsed as JSON, else taken as strings. The result records the assignments under ``"overrides"``.
    """
    from retrieval.engine.config import SECTIONS, TOP_KEYS, Preset

    out = copy.deepcopy(preset)
    applied = []
    for item in assignments or ():
        key, sep, raw = str(item).partition("=")
        if not sep or not key:
            raise ParamError("set", item, "KEY=VALUE (e.g. projection.n_components=512)")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        parts = key.split(".")
        node = out
        for depth, part in enumerate(parts[:-1]):
            if depth == 0 and part not in node and (part in SECTIONS or part not in TOP_KEYS):
                node[part] = {}  # a section left to its defaults (or a typo, named by Preset.from_dict)
            if not isinstance(node, dict) or part not in node:
                raise ParamError("set", key, template="{set} {value}: preset {preset!r} has no key {missing!r}.",
                                 preset=preset.get("name"), missing=".".join(parts[:depth + 1]))
            if node[part] is None:
                raise ParamError("set", key, template="{set} {value}: {null!r} is null in preset {preset!r}; set the "
                                 "whole section instead.", null=".".join(parts[:depth + 1]), preset=preset.get("name"))
            node = node[part]
        typed = len(parts) == 1 or len(parts) == 2 and (parts[0] in SECTIONS or parts[0] not in TOP_KEYS)
        if not isinstance(node, dict) or (parts[-1] not in node and not typed):
            raise ParamError("set", key, template="{set} {value}: preset {preset!r} has no key {value!r}.",
                             preset=preset.get("name"))
        node[parts[-1]] = value
        try:
            Preset.from_dict(out)
        except ValueError as exc:
            raise ParamError("set", item, template="{set} {value}: {why}", why=str(exc)) from None
        applied.append(f"{key}={json.dumps(value)}")
    if applied:
        out["overrides"] = list(out.get("overrides", [])) + applied
    return out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
