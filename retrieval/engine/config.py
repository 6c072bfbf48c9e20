"""Typed, strict preset configuration: one frozen dataclass per preset section, every key declared once.

A preset file (:mod:`retrieval.engine.presets`) is parsed by :meth:`Preset.from_dict`, which refuses an unknown or
misspelled key (naming the closest valid one), a value of the wrong type and a value out of its range, each with
one line, e.g. ``preset 'default': unknown key 'index.nprob' (did you mean 'nprobe'?)``. Each key's default, range
and meaning are declared once, in the ``setting(...)`` of its field below; the pipeline reads the typed fields, never
``dict.get(key, default)``. ``docs/user-guide.md`` (section "Presets") tabulates them (:func:`key_table`).

:meth:`Preset.to_dict` gives back the keys the source set (``Preset.from_dict(d).to_dict() == d``: the index folder
stores, and :func:`retrieval.engine.presets.preset_digest` hashes, that dict); ``to_dict(full=True)`` the effective
configuration with every default filled in (``retrieval presets --show NAME``).

Which sections a preset has depends on its ``kind``: ``global`` and ``binary`` run
features -> local_pca -> aggregation -> projection -> index, ``object`` runs features -> object_search; all have
``training`` and ``search``. A section of another kind is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from retrieval.engine.config_keys import (
    PresetError,
    Section,
    closest_key,
    range_text,
    setting,
    when_kinds,
    when_types,
)
from retrieval.features.detectors import available_detectors, get_detector
from retrieval.features.image import DEFAULT_MAX_MEGAPIXELS, DEFAULT_MAX_SIDE, DEFAULT_MIN_SIDE
from retrieval.rerank.verification import DEFAULT_MIN_INLIERS

KINDS = ("global", "binary", "object")
AGGREGATION_METHODS = ("fisher", "vlad", "bow")
"""Aggregations the global and binary backends run (``aggregation.method``)."""
GLOBAL_INDEX_TYPES = ("flat", "ivfadc", "adc", "ivfadc_adc")
"""``index.type`` of global presets: ``flat`` exhaustive inner product; ``ivfadc`` IVFADC shortlist re-scored
exactly (from ``index.min_images`` images); ``adc`` exhaustive PQ/ADC ranking (Jegou et al. 2012, eq. 21-23, codes
only); ``ivfadc_adc`` IVFADC ranking by its own ADC distances (Jegou et al. 2012, sec. VI-C, codes only)."""
BINARY_DISTANCES = ("hamming", "expectation", "expectation_hat", "lower_bound")
"""Distances of the binary backend (``search.method``; Gordo et al. 2014)."""
OBJECT_METHODS = ("l1", "l2", "delta1", "delta2", "asmk")
"""Scorings of the object backend (``search.method``): the dissimilarities of Zhu et al. 2013 and the aggregated
selective match kernel with binary signatures (ASMK*, Tolias et al. 2013; needs ``object_search.signatures``)."""
BINARY_EMBEDDINGS = ("LSH", "LSBC", "SH", "PCAE", "PCAERR", "PCAEITQ")
"""Classes of :mod:`retrieval.codes.binary` a binary preset may name (``index.embedding``)."""

SEARCH_METHODS = {"global": ("ip",), "binary": BINARY_DISTANCES, "object": OBJECT_METHODS}
RERANKS = {"global": ("none", "spatial"), "binary": ("none", "spatial"), "object": ("none", "exact", "spatial")}
DEFAULT_SEARCH_METHOD = {"global": "ip", "binary": "expectation", "object": "delta1"}
DEFAULT_INDEX_TYPE = {"global": "flat", "binary": "binary"}
INDEX_TYPES = {"global": GLOBAL_INDEX_TYPES, "binary": ("binary",)}
POWER_ALPHA = {"fisher": 0.5, "vlad": 0.5, "bow": 1.0}
"""``aggregation.alpha`` when a preset does not set it: power normalisation 0.5 (Jegou et al. 2012, eq. 7) for Fisher
and VLAD, 1.0 (no power normalisation) for BoW."""


METHOD_ALPHA = {"delta1": 0.5, "delta2": 0.5, "asmk": 3.0}
"""``search.alpha`` of an object scoring chosen at query time (``--method``) other than the preset's: alpha_1 /
alpha_2 = 0.5 (Zhu et al. 2013), the selectivity exponent 3 (Tolias et al. 2013); l1 / l2 take none."""


@dataclass(frozen=True)
class FeaturesConfig(Section):
    """``features``: the :class:`retrieval.features.FeatureExtractor` parameters; any other key is a parameter of
    the chosen detector (e.g. ``threshold`` of ``hesaff``), checked against the detector's own list."""

    section: ClassVar[str] = "features"
    detector: str = setting("hesaff", "local feature detector (retrieval.features.detectors)", kind=str,
                         choices=available_detectors)
    max_side: int | None = setting(DEFAULT_MAX_SIDE, "longest side of the working image in pixels (null: full "
                                "resolution)", low=8, nullable=True)
    max_megapixels: float = setting(DEFAULT_MAX_MEGAPIXELS, "larger images are refused (decompression guard)",
                                 kind=float, low=0, closed="neither")
    min_side: int = setting(DEFAULT_MIN_SIDE, "smaller images are refused", low=1)
    upscale_to: int | None = setting(None, "images whose longest side is below this are enlarged to it (bicubic) "
                                  "before detection (null: never)", low=8, nullable=True,
                                  used=lambda section, kind: section.upscale_to is not None)
    params: dict = field(default_factory=dict)

    @classmethod
    def _extra_keys(cls, data, where):
        declared = set(cls.keys())
        extra = set(data) - declared
        if not extra:
            return set()
        name = data.get("detector", "hesaff")
        try:
            known = set(get_detector(name).params)
        except ValueError:  # unknown detector: reported by the declared check
            return set()
        for key in sorted(extra):
            if key not in known:
                raise PresetError(f"preset {where}: unknown key 'features.{key}'"
                                  + closest_key(key, sorted(declared | known)))
        try:
            get_detector(name, **{k: data[k] for k in extra})
        except ValueError as exc:
            raise PresetError(f"preset {where}: features: {exc}") from None
        return extra

    @classmethod
    def _extra_values(cls, data, extra):
        return {"params": {k: data[k] for k in data if k in extra}}

    def detector_params(self) -> dict:
        """Every parameter of the detector, defaults filled in."""
        return dict(get_detector(self.detector, **self.params).params)

    def extractor_kwargs(self) -> dict:
        """Keyword arguments of :class:`retrieval.features.FeatureExtractor`."""
        out = {"detector": self.detector, "max_side": self.max_side, "max_megapixels": self.max_megapixels,
               "min_side": self.min_side, **self.params}
        if self.upscale_to is not None:
            out["upscale_to"] = self.upscale_to
        return out

    def to_dict(self, full: bool = False) -> dict:
        out = super().to_dict(full)
        extra = self.detector_params() if full else self.params
        merged = {**out, **extra}
        return merged if full else {k: merged[k] for k in self._given}


@dataclass(frozen=True)
class LocalPCAConfig(Section):
    section: ClassVar[str] = "local_pca"
    n_components: int = setting(64, "dimension of the RootSIFT descriptors after PCA (at most 128)", low=1, high=128)
    whiten: bool = setting(False, "whiten the reduced descriptors", kind=bool)


@dataclass(frozen=True)
class AggregationConfig(Section):
    section: ClassVar[str] = "aggregation"
    method: str = setting("fisher", "fisher (Jegou et al. 2012, eq. 6), vlad (eq. 18) or bow", kind=str,
                       choices=AGGREGATION_METHODS)
    n_components: int = setting(64, "Gaussians (fisher), centroids (vlad) or visual words (bow)", low=1)
    alpha: float = setting(None, "power normalisation exponent (eq. 7); default 0.5 for fisher/vlad, 1.0 for bow",
                        kind=float, low=0, high=1, closed="right",
                        by_kind=lambda values, kind: POWER_ALPHA[values.get("method", "fisher")])
    idf: bool = setting(True, "idf weighting of the BoW histogram (bow only)", kind=bool,
                     used=lambda section, kind: section.method == "bow")


@dataclass(frozen=True)
class ProjectionConfig(Section):
    section: ClassVar[str] = "projection"
    n_components: int = setting(256, "D': dimension after the PCA of the aggregated vector (section null: D' = D)",
                             low=1)
    whiten: bool = setting(False, "whiten the projected vector", kind=bool)
    renormalize: bool = setting(False, "L2-normalise again after the projection", kind=bool)
    rotation: bool = setting(False, "random orthogonal rotation after the PCA (also index.rotation)", kind=bool)


@dataclass(frozen=True)
class IndexConfig(Section):
    section: ClassVar[str] = "index"
    type: str = setting(None, "global: flat, ivfadc, adc or ivfadc_adc (default flat); binary: binary", kind=str,
                     choices=INDEX_TYPES, by_kind=lambda values, kind: DEFAULT_INDEX_TYPE[kind])
    min_images: int = setting(4096, "ivfadc: images from which the IVFADC shortlist is built", low=0,
                           used=when_types("ivfadc"))
    nlist: int = setting(256, "ivfadc, ivfadc_adc: inverted lists (coarse centroids)", low=1,
                      used=when_types("ivfadc", "ivfadc_adc"))
    nprobe: int = setting(32, "ivfadc, ivfadc_adc: lists visited per query", low=1, used=when_types("ivfadc", "ivfadc_adc"))
    M: int = setting(32, "ivfadc, adc, ivfadc_adc: PQ sub-quantisers", low=1, used=when_types("ivfadc", "adc", "ivfadc_adc"))
    nbits: int = setting(8, "ivfadc, adc, ivfadc_adc: bits per sub-quantiser code", low=1, high=16,
                      used=when_types("ivfadc", "adc", "ivfadc_adc"))
    shortlist: int = setting(256, "ivfadc: IVFADC candidates re-scored exactly", low=1, used=when_types("ivfadc"))
    vectors: str = setting("float32", "global: storage type of the stored global vectors (vectors.npy); float16 halves "
                        "the bytes, inner products within 1e-3", kind=str, choices=("float32", "float16"),
                        used=lambda section, kind: kind == "global")
    rotation: bool = setting(False, "random rotation after the PCA of the aggregated vector (as projection.rotation)",
                          kind=bool)
    embedding: str = setting("PCAEITQ", "binary: embedding (Gordo et al. 2014)", kind=str, choices=BINARY_EMBEDDINGS,
                          used=when_types("binary"))
    bits: int = setting(256, "binary: code length in bits", low=8, used=when_types("binary"))
    distance: str | None = setting(None, "binary: the distance the preset was designed for (informative; the ranking "
                                "uses search.method)", kind=str, choices=BINARY_DISTANCES, nullable=True,
                                used=when_types("binary"))


@dataclass(frozen=True)
class TrainingConfig(Section):
    section: ClassVar[str] = "training"
    max_images: int = setting(1000, "images of the collection sampled to train the model", low=1)
    max_descriptors: int = setting(200_000, "local descriptors sampled (evenly over the images) to train the "
                                "vocabulary and local PCA", low=1)
    random_state: int = setting(0, "seed of every random choice of training", low=0)
    min_descriptors_per_word: int = setting(10, "small collections: the vocabulary is capped at descriptors / this",
                                         low=1)


@dataclass(frozen=True)
class SearchConfig(Section):
    section: ClassVar[str] = "search"
    method: str = setting(None, "scoring: ip (global); hamming, expectation, expectation_hat, lower_bound (binary, "
                       "default expectation); l1, l2, delta1, delta2, asmk (object, default delta1)", kind=str,
                       choices=SEARCH_METHODS, by_kind=lambda values, kind: DEFAULT_SEARCH_METHOD[kind])
    rerank: str = setting("none", "re-ranking of the shortlist: none, spatial (global, binary); none, exact, "
                       "spatial (object)", kind=str, choices=RERANKS)
    shortlist: int = setting(50, "global, binary: results re-ranked spatially (object: object_search.shortlist)",
                          low=1, used=when_kinds("global", "binary"))
    match_probes: int = setting(8, "cells of the model's match cells each query descriptor probes in the ratio test of "
                             "the verification (retrieval.rerank.cells); 0: the exact test against every descriptor", low=0)
    verify_query_features: int = setting(0, "the verification matches at most this many of the query's features, "
                                      "of largest scale (the database side keeps all); 0: all", low=0)
    verify_on: str = setting("descriptors", "global: what the verification reads of an indexed photo: descriptors "
                          "(its stored features, Lowe's ratio test) or evidence (its visual words, 64-bit Hamming "
                          "signatures and frames, about 24 bytes a feature, matched with all of the query's "
                          "features: retrieval.rerank.evidence)", kind=str, choices=("descriptors", "evidence"),
                          used=when_kinds("global"))
    evidence_words: int = setting(20_000, "verify_on evidence: words of the evidence vocabulary (approximate "
                               "k-means on the training descriptors)", low=2,
                               used=lambda section, kind: section.verify_on == "evidence")
    verify_patience: int = setting(0, "global, binary: the shortlist is verified in first-stage order and verification stops after this many unverified results in a row (0: the whole shortlist)", low=0, used=when_kinds("global", "binary"))
    verify_enough: int = setting(0, "global, binary: the shortlist is verified in first-stage order and verification stops once this many results have verified; those not checked follow the verified ones (0: the whole shortlist)", low=0, used=when_kinds("global", "binary"))
    verify_top: int = setting(50, "object: the first results (of the exact re-ranking of object_search.shortlist) "
                           "verified spatially on the stored features", low=1, used=when_kinds("object"))
    min_inliers: int = setting(DEFAULT_MIN_INLIERS, "global, binary: one-to-one inliers for a verified match (9: false-verification rate 0.03 % on 20,000 unrelated real pairs, docs/results.md)", low=1, used=when_kinds("global", "binary"))
    ratio: float = setting(0.85, "Lowe's ratio test of the tentative matches of the verification", kind=float, low=0,
                        high=1, closed="right")
    alpha: float = setting(0.5, "object: alpha_1 of delta1 / alpha_2 of delta2 (Zhu et al. 2013, eq. 8-11), the "
                        "selectivity exponent of asmk (Tolias et al. 2013, eq. 7)",
                        kind=float, low=0, used=when_kinds("object"))
    query_expansion: int = setting(0, "average query expansion: the query averaged with this many verified hits "
                                "(global vectors; object: BoW histograms or asmk signatures in the matched boxes) and "
                                "searched again; "
                                "0 = off; needs rerank spatial", low=0)
    rotation_fallback: bool = setting(False, "a whole-image query that verifies nothing but copies of itself is searched "
                                   "again turned by 90 and 270 degrees (upright features do not match a sideways "
                                   "photo); needs rerank spatial", kind=bool)
    rotation_verify_top: int = setting(10, "rotation_fallback: first-stage results of each turned search verified "
                                    "(every match the turned searches verified on Holidays and UKBench ranked in "
                                    "their first 3)", low=1, used=lambda section, kind: section.rotation_fallback)


@dataclass(frozen=True)
class ObjectSearchConfig(Section):
    """``object_search``: the :class:`retrieval.engine.object.searcher.ObjectSearcher` parameters."""

    section: ClassVar[str] = "object_search"
    n_words: int = setting(100_000, "vocabulary size (approximate k-means)", low=1)
    assignment: str = setting("hard", "hard or soft assignment to words", kind=str, choices=("hard", "soft"))
    idf: bool = setting(True, "idf weighting", kind=bool)
    rootsift: bool = setting(True, "RootSIFT descriptors", kind=bool)
    shortlist: int = setting(200, "results re-ranked exactly / spatially", low=1)
    min_inliers: int = setting(DEFAULT_MIN_INLIERS, "one-to-one inliers for a verified match (as search.min_inliers)", low=1)
    vocabulary_params: dict | None = setting(None, "extra ApproximateKMeans parameters (n_iter, nprobe, ...)",
                                          kind=dict, nullable=True)
    signatures: bool = setting(False, "store per image and word the binary signature of the aggregated residual "
                            "(search.method asmk)", kind=bool)
    query_words: int = setting(1, "asmk: words per query descriptor (multiple assignment)", low=1)
    threshold: float = setting(0.0, "asmk: threshold tau of the selective function", kind=float, low=-1)
    asymmetric: bool = setting(True, "asmk: query residuals not binarised (asymmetric similarity)", kind=bool)

    def searcher_kwargs(self, training: TrainingConfig) -> dict:
        """Keyword arguments of :class:`ObjectSearcher` (seed and training sample size from ``training``)."""
        return {**self.to_dict(full=True), "random_state": training.random_state,
                "max_train_descriptors": training.max_descriptors}


SECTIONS = {c.section: c for c in (FeaturesConfig, LocalPCAConfig, AggregationConfig, ProjectionConfig,
                                   IndexConfig, TrainingConfig, SearchConfig, ObjectSearchConfig)}
KIND_SECTIONS = {
    "global": ("features", "local_pca", "aggregation", "projection", "index", "training", "search"),
    "binary": ("features", "local_pca", "aggregation", "projection", "index", "training", "search"),
    "object": ("features", "object_search", "training", "search"),
}
NULLABLE_SECTIONS = ("projection",)
"""Sections that may be ``null`` (and are null when absent): no stage."""
_HEAD = ("name", "version", "kind", "description")
TOP_KEYS = (*_HEAD, "requires", *SECTIONS, "paper", "overrides")
"""Every top-level key of a preset."""


@dataclass(frozen=True)
class Preset:
    """A parsed preset. Sections a kind does not use are None (``projection`` may be None: no projection)."""

    name: str
    version: int
    kind: str
    description: str
    requires: tuple = ()
    features: FeaturesConfig | None = None
    local_pca: LocalPCAConfig | None = None
    aggregation: AggregationConfig | None = None
    projection: ProjectionConfig | None = None
    index: IndexConfig | None = None
    training: TrainingConfig | None = None
    search: SearchConfig | None = None
    object_search: ObjectSearchConfig | None = None
    paper: dict | None = None
    overrides: tuple = ()
    _given: tuple = field(default=(), compare=False, repr=False)

    @classmethod
    def from_dict(cls, data, where: str | None = None) -> Preset:
        """Parse ``data`` strictly; ``where`` names the preset in messages (default: its ``name``, quoted)."""
        if not isinstance(data, dict):
            raise PresetError(f"preset {where or ''}: expected a JSON object; got {type(data).__name__}.")
        where = where or repr(data.get("name"))
        missing = [k for k in _HEAD if k not in data]
        if missing:
            raise PresetError(f"preset {where}: missing key(s) {', '.join(missing)}.")
        kind = data["kind"]
        if kind not in KINDS:
            raise PresetError(f"preset {where}: 'kind' must be one of {', '.join(KINDS)}; got {kind!r}.")
        if not isinstance(data["version"], int) or isinstance(data["version"], bool):
            raise PresetError(f"preset {where}: 'version' must be an int; got {data['version']!r}.")
        if not isinstance(data["name"], str) or not data["name"]:
            raise PresetError(f"preset {where}: 'name' must be a non-empty string; got {data['name']!r}.")
        if not isinstance(data["description"], str):
            raise PresetError(f"preset {where}: 'description' must be a string; got {data['description']!r}.")
        for key in data:
            if key not in TOP_KEYS:
                raise PresetError(f"preset {where}: unknown key {key!r}" + closest_key(key, TOP_KEYS))
        values = {k: data[k] for k in _HEAD}
        values["requires"] = _string_list(data.get("requires", []), "requires", where)
        for spec in values["requires"]:
            if ":" not in spec:
                raise PresetError(f"preset {where}: requires entry {spec!r} must read 'module:attribute'.")
        values["overrides"] = _string_list(data.get("overrides", []), "overrides", where)
        if "paper" in data:
            if not isinstance(data["paper"], dict):
                raise PresetError(f"preset {where}: 'paper' must be an object; got {data['paper']!r}.")
            values["paper"] = data["paper"]
        allowed = KIND_SECTIONS[kind]
        for name, section in SECTIONS.items():
            if name not in allowed:
                if name in data:
                    raise PresetError(f"preset {where}: section {name!r} is not used by a {kind} preset (its "
                                      f"sections: {', '.join(allowed)}).")
                continue
            if name in NULLABLE_SECTIONS and data.get(name) is None:
                continue
            values[name] = section.parse(data.get(name, {}), where, kind)
        if kind == "object" and values["search"].method == "asmk" and not values["object_search"].signatures:
            raise PresetError(f"preset {where}: search.method 'asmk' scores binary signatures: it needs "
                              f"object_search.signatures = true.")
        return cls(**values, _given=tuple(data))

    def to_dict(self, full: bool = False) -> dict:
        """The source's keys (``full=False``: ``Preset.from_dict(d).to_dict() == d``) or the effective
        configuration with every default filled in (``full=True``)."""
        out = {k: getattr(self, k) for k in _HEAD}
        out["requires"] = list(self.requires)
        for name in KIND_SECTIONS[self.kind]:
            section = getattr(self, name)
            out[name] = None if section is None else section.to_dict(full)
        if self.paper is not None:
            out["paper"] = self.paper
        out["overrides"] = list(self.overrides)
        if full:
            return out
        return {k: out[k] for k in self._given}


def _string_list(value, key: str, where: str) -> tuple:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PresetError(f"preset {where}: {key!r} must be a list of strings; got {value!r}.")
    return tuple(value)


def key_table() -> list[tuple[str, str, str, str, str]]:
    """``(section, key, default, range, meaning)`` of every declared key (the table of docs/user-guide.md)."""
    import json

    rows = []
    for name, section in SECTIONS.items():
        for f in fields(section):
            m = f.metadata
            if not m.get("doc"):
                continue
            default = "(see meaning)" if m["by_kind"] is not None else json.dumps(f.default)
            rows.append((name, f.name, default, range_text(m), m["doc"]))
    return rows
