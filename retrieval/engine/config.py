"""Typed, strict preset configuration: one frozen dataclass per preset section, every key declared once.

A preset file (:mod:`retrieval.engine.presets`) is parsed by :meth:`Preset.from_dict`, which refuses an unknown or
misspelled key (naming the closest valid one), a value of the wrong type and a value out of its range, each with
one line, e.g. ``preset 'default': unknown key 'index.nprob' (did you mean 'nprobe'?)``. Each key's default, range
and meaning are declared once, in the ``_key(...)`` of its field below; the pipeline reads the typed fields, never
``dict.get(key, default)``. ``docs/user-guide.md`` (section "Presets") tabulates them (:func:`key_table`).

:meth:`Preset.to_dict` gives back the keys the source set (``Preset.from_dict(d).to_dict() == d``: the index folder
stores, and :func:`retrieval.engine.presets.preset_digest` hashes, that dict); ``to_dict(full=True)`` the effective
configuration with every default filled in (``retrieval presets --show NAME``).

Which sections a preset has depends on its ``kind``: ``global`` and ``binary`` run
features -> local_pca -> aggregation -> projection -> index, ``object`` runs features -> object_search; all have
``training`` and ``search``. A section of another kind is refused.
"""

from __future__ import annotations

import difflib
import numbers
from dataclasses import dataclass, field, fields
from typing import ClassVar

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


class PresetError(ValueError):
    """A preset is malformed: unknown key, wrong type, value out of range (one line naming key and value)."""


def _key(default, doc: str, *, kind=int, low=None, high=None, closed="both", choices=None, nullable=False,
         by_kind=None, used=None):
    """A declared preset key: its default, type (``int``, ``float``, ``bool``, ``str``, ``dict``), range or choices.

    ``choices`` may be a dict ``{preset kind: choices}`` or a callable returning the choices (the detectors
    registered at run time); ``by_kind(values, kind)`` gives a default that depends on
    the preset's kind or on other keys of the section (the field's default is then None); ``used(section, kind)``
    says whether the pipeline reads the key in that configuration (an unused key is accepted but left out of the
    effective configuration unless the preset sets it)."""
    return field(default=default, metadata={"doc": doc, "kind": kind, "low": low, "high": high, "closed": closed,
                                            "choices": choices, "nullable": nullable, "by_kind": by_kind,
                                            "used": used})


def _types(*types):
    return lambda section, kind: section.type in types


def _kinds(*kinds):
    return lambda section, kind: kind in kinds


def _range_text(m, preset_kind=None) -> str:
    choices = m["choices"]() if callable(m["choices"]) else m["choices"]
    if isinstance(choices, dict):
        choices = choices.get(preset_kind) or sorted({c for cs in choices.values() for c in cs})
    if choices:
        text = "one of " + ", ".join(repr(c) for c in choices)
    elif m["kind"] is bool:
        text = "true or false"
    elif m["kind"] is dict:
        text = "an object"
    else:
        name = {int: "an int", float: "a number", str: "a string"}[m["kind"]]
        lo, hi, closed = m["low"], m["high"], m["closed"]
        parts = []
        if lo is not None:
            parts.append(f"{'>=' if closed in ('both', 'left') else '>'} {lo}")
        if hi is not None:
            parts.append(f"{'<=' if closed in ('both', 'right') else '<'} {hi}")
        text = name + (" " + " and ".join(parts) if parts else "")
    return text + (" (or null)" if m["nullable"] else "")


def _closest(word: str, valid) -> str:
    close = difflib.get_close_matches(word, list(valid), n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (valid keys: {', '.join(valid)})"


def _check_value(where: str, path: str, value, m, preset_kind):
    """``value`` checked against the declaration ``m`` of key ``path``; ints given for floats become floats."""
    if value is None and m["nullable"]:
        return None
    kind = m["kind"]
    ok = {int: isinstance(value, numbers.Integral), float: isinstance(value, numbers.Real),
          bool: isinstance(value, bool), str: isinstance(value, str), dict: isinstance(value, dict)}[kind]
    ok = ok and (kind is bool or not isinstance(value, bool))
    problem = "out of range" if ok else "of the wrong type"
    if ok and kind in (int, float):
        lo, hi, closed = m["low"], m["high"], m["closed"]
        if lo is not None and (value < lo or value == lo and closed in ("right", "neither")):
            ok = False
        if hi is not None and (value > hi or value == hi and closed in ("left", "neither")):
            ok = False
    choices = m["choices"]() if callable(m["choices"]) else m["choices"]
    if isinstance(choices, dict):
        choices = choices.get(preset_kind, ())
    if ok and choices and value not in choices:
        ok = False
    if not ok:
        raise PresetError(f"preset {where}: {path} = {value!r} is {problem}: expected {_range_text(m, preset_kind)}.")
    return float(value) if kind is float else value


@dataclass(frozen=True)
class _Section:
    """Parsing, defaults and serialisation shared by the section dataclasses; ``_given`` (the keys the source
    set) and ``_kind`` (the preset's kind) are filled by :meth:`parse`."""

    section: ClassVar[str] = ""
    _given: tuple = field(default=(), compare=False, repr=False)
    _kind: str = field(default="global", compare=False, repr=False)

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.metadata.get("doc")]

    @classmethod
    def parse(cls, data, where: str, preset_kind: str):
        if not isinstance(data, dict):
            raise PresetError(f"preset {where}: section {cls.section!r} must be an object; got {data!r}.")
        declared = {f.name: f.metadata for f in fields(cls) if f.metadata.get("doc")}
        values = {}
        extra = cls._extra_keys(data, where)
        for key, value in data.items():
            if key in extra:
                continue
            if key not in declared:
                raise PresetError(f"preset {where}: unknown key '{cls.section}.{key}'"
                                  + _closest(key, list(declared) + sorted(extra)))
            values[key] = _check_value(where, f"{cls.section}.{key}", value, declared[key], preset_kind)
        for key, m in declared.items():
            if key not in values and m["by_kind"] is not None:
                values[key] = m["by_kind"](values, preset_kind)
        return cls(**values, **cls._extra_values(data, extra), _given=tuple(data), _kind=preset_kind)

    @classmethod
    def _extra_keys(cls, data: dict, where: str) -> set:
        return set()

    @classmethod
    def _extra_values(cls, data: dict, extra: set) -> dict:
        return {}

    def to_dict(self, full: bool = False) -> dict:
        """The keys the source set (``full=False``) or every key the pipeline reads for this preset's kind, with
        its effective value (``full=True``; keys the source set are always included)."""
        out = {}
        for f in fields(self):
            m = f.metadata
            if not m.get("doc"):
                continue
            if f.name in self._given or full and (m["used"] is None or m["used"](self, self._kind)):
                value = getattr(self, f.name)
                out[f.name] = dict(value) if isinstance(value, dict) else value
        return out


@dataclass(frozen=True)
class FeaturesConfig(_Section):
    """``features``: the :class:`retrieval.features.FeatureExtractor` parameters; any other key is a parameter of
    the chosen detector (e.g. ``threshold`` of ``hesaff``), checked against the detector's own list."""

    section: ClassVar[str] = "features"
    detector: str = _key("hesaff", "local feature detector (retrieval.features.detectors)", kind=str,
                         choices=available_detectors)
    max_side: int | None = _key(DEFAULT_MAX_SIDE, "longest side of the working image in pixels (null: full "
                                "resolution)", low=8, nullable=True)
    max_megapixels: float = _key(DEFAULT_MAX_MEGAPIXELS, "larger images are refused (decompression guard)",
                                 kind=float, low=0, closed="neither")
    min_side: int = _key(DEFAULT_MIN_SIDE, "smaller images are refused", low=1)
    upscale_to: int | None = _key(None, "images whose longest side is below this are enlarged to it (bicubic) "
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
                                  + _closest(key, sorted(declared | known)))
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
class LocalPCAConfig(_Section):
    section: ClassVar[str] = "local_pca"
    n_components: int = _key(64, "dimension of the RootSIFT descriptors after PCA (at most 128)", low=1, high=128)
    whiten: bool = _key(False, "whiten the reduced descriptors", kind=bool)


@dataclass(frozen=True)
class AggregationConfig(_Section):
    section: ClassVar[str] = "aggregation"
    method: str = _key("fisher", "fisher (Jegou et al. 2012, eq. 6), vlad (eq. 18) or bow", kind=str,
                       choices=AGGREGATION_METHODS)
    n_components: int = _key(64, "Gaussians (fisher), centroids (vlad) or visual words (bow)", low=1)
    alpha: float = _key(None, "power normalisation exponent (eq. 7); default 0.5 for fisher/vlad, 1.0 for bow",
                        kind=float, low=0, high=1, closed="right",
                        by_kind=lambda values, kind: POWER_ALPHA[values.get("method", "fisher")])
    idf: bool = _key(True, "idf weighting of the BoW histogram (bow only)", kind=bool,
                     used=lambda section, kind: section.method == "bow")


@dataclass(frozen=True)
class ProjectionConfig(_Section):
    section: ClassVar[str] = "projection"
    n_components: int = _key(256, "D': dimension after the PCA of the aggregated vector (section null: D' = D)",
                             low=1)
    whiten: bool = _key(False, "whiten the projected vector", kind=bool)
    renormalize: bool = _key(False, "L2-normalise again after the projection", kind=bool)
    rotation: bool = _key(False, "random orthogonal rotation after the PCA (also index.rotation)", kind=bool)


@dataclass(frozen=True)
class IndexConfig(_Section):
    section: ClassVar[str] = "index"
    type: str = _key(None, "global: flat, ivfadc, adc or ivfadc_adc (default flat); binary: binary", kind=str,
                     choices=INDEX_TYPES, by_kind=lambda values, kind: DEFAULT_INDEX_TYPE[kind])
    min_images: int = _key(4096, "ivfadc: images from which the IVFADC shortlist is built", low=0,
                           used=_types("ivfadc"))
    nlist: int = _key(256, "ivfadc, ivfadc_adc: inverted lists (coarse centroids)", low=1,
                      used=_types("ivfadc", "ivfadc_adc"))
    nprobe: int = _key(32, "ivfadc, ivfadc_adc: lists visited per query", low=1, used=_types("ivfadc", "ivfadc_adc"))
    M: int = _key(32, "ivfadc, adc, ivfadc_adc: PQ sub-quantisers", low=1, used=_types("ivfadc", "adc", "ivfadc_adc"))
    nbits: int = _key(8, "ivfadc, adc, ivfadc_adc: bits per sub-quantiser code", low=1, high=16,
                      used=_types("ivfadc", "adc", "ivfadc_adc"))
    shortlist: int = _key(256, "ivfadc: IVFADC candidates re-scored exactly", low=1, used=_types("ivfadc"))
    vectors: str = _key("float32", "global: storage type of the stored global vectors (vectors.npy); float16 halves "
                        "the bytes, inner products within 1e-3", kind=str, choices=("float32", "float16"),
                        used=lambda section, kind: kind == "global")
    rotation: bool = _key(False, "random rotation after the PCA of the aggregated vector (as projection.rotation)",
                          kind=bool)
    embedding: str = _key("PCAEITQ", "binary: embedding (Gordo et al. 2014)", kind=str, choices=BINARY_EMBEDDINGS,
                          used=_types("binary"))
    bits: int = _key(256, "binary: code length in bits", low=8, used=_types("binary"))
    distance: str | None = _key(None, "binary: the distance the preset was designed for (informative; the ranking "
                                "uses search.method)", kind=str, choices=BINARY_DISTANCES, nullable=True,
                                used=_types("binary"))


@dataclass(frozen=True)
class TrainingConfig(_Section):
    section: ClassVar[str] = "training"
    max_images: int = _key(1000, "images of the collection sampled to train the model", low=1)
    max_descriptors: int = _key(200_000, "local descriptors sampled (evenly over the images) to train the "
                                "vocabulary and local PCA", low=1)
    random_state: int = _key(0, "seed of every random choice of training", low=0)
    min_descriptors_per_word: int = _key(10, "small collections: the vocabulary is capped at descriptors / this",
                                         low=1)


@dataclass(frozen=True)
class SearchConfig(_Section):
    section: ClassVar[str] = "search"
    method: str = _key(None, "scoring: ip (global); hamming, expectation, expectation_hat, lower_bound (binary, "
                       "default expectation); l1, l2, delta1, delta2, asmk (object, default delta1)", kind=str,
                       choices=SEARCH_METHODS, by_kind=lambda values, kind: DEFAULT_SEARCH_METHOD[kind])
    rerank: str = _key("none", "re-ranking of the shortlist: none, spatial (global, binary); none, exact, "
                       "spatial (object)", kind=str, choices=RERANKS)
    shortlist: int = _key(50, "global, binary: results re-ranked spatially (object: object_search.shortlist)",
                          low=1, used=_kinds("global", "binary"))
    match_probes: int = _key(8, "cells of the model's match cells each query descriptor probes in the ratio test of "
                             "the verification (retrieval.rerank.cells); 0: the exact test against every descriptor", low=0)
    verify_query_features: int = _key(0, "the verification matches at most this many of the query's features, "
                                      "of largest scale (the database side keeps all); 0: all", low=0)
    verify_patience: int = _key(0, "global, binary: the shortlist is verified in first-stage order and verification stops after this many unverified results in a row (0: the whole shortlist)", low=0, used=_kinds("global", "binary"))
    verify_enough: int = _key(0, "global, binary: the shortlist is verified in first-stage order and verification stops once this many results have verified; those not checked follow the verified ones (0: the whole shortlist)", low=0, used=_kinds("global", "binary"))
    verify_top: int = _key(50, "object: the first results (of the exact re-ranking of object_search.shortlist) "
                           "verified spatially on the stored features", low=1, used=_kinds("object"))
    min_inliers: int = _key(DEFAULT_MIN_INLIERS, "global, binary: one-to-one inliers for a verified match (9: false-verification rate 0.03 % on 20,000 unrelated real pairs, docs/results.md)", low=1, used=_kinds("global", "binary"))
    ratio: float = _key(0.85, "Lowe's ratio test of the tentative matches of the verification", kind=float, low=0,
                        high=1, closed="right")
    alpha: float = _key(0.5, "object: alpha_1 of delta1 / alpha_2 of delta2 (Zhu et al. 2013, eq. 8-11), the "
                        "selectivity exponent of asmk (Tolias et al. 2013, eq. 7)",
                        kind=float, low=0, used=_kinds("object"))
    query_expansion: int = _key(0, "average query expansion: the query averaged with this many verified hits "
                                "(global vectors; object: BoW histograms or asmk signatures in the matched boxes) and "
                                "searched again; "
                                "0 = off; needs rerank spatial", low=0)
    rotation_fallback: bool = _key(False, "a whole-image query that verifies nothing but copies of itself is searched "
                                   "again turned by 90 and 270 degrees (upright features do not match a sideways "
                                   "photo); needs rerank spatial", kind=bool)
    rotation_verify_top: int = _key(10, "rotation_fallback: first-stage results of each turned search verified "
                                    "(every match the turned searches verified on Holidays and UKBench ranked in "
                                    "their first 3)", low=1, used=lambda section, kind: section.rotation_fallback)


@dataclass(frozen=True)
class ObjectSearchConfig(_Section):
    """``object_search``: the :class:`retrieval.engine.object_search.ObjectSearcher` parameters."""

    section: ClassVar[str] = "object_search"
    n_words: int = _key(100_000, "vocabulary size (approximate k-means)", low=1)
    assignment: str = _key("hard", "hard or soft assignment to words", kind=str, choices=("hard", "soft"))
    idf: bool = _key(True, "idf weighting", kind=bool)
    rootsift: bool = _key(True, "RootSIFT descriptors", kind=bool)
    shortlist: int = _key(200, "results re-ranked exactly / spatially", low=1)
    min_inliers: int = _key(DEFAULT_MIN_INLIERS, "one-to-one inliers for a verified match (as search.min_inliers)", low=1)
    vocabulary_params: dict | None = _key(None, "extra ApproximateKMeans parameters (n_iter, nprobe, ...)",
                                          kind=dict, nullable=True)
    signatures: bool = _key(False, "store per image and word the binary signature of the aggregated residual "
                            "(search.method asmk)", kind=bool)
    query_words: int = _key(1, "asmk: words per query descriptor (multiple assignment)", low=1)
    threshold: float = _key(0.0, "asmk: threshold tau of the selective function", kind=float, low=-1)
    asymmetric: bool = _key(True, "asmk: query residuals not binarised (asymmetric similarity)", kind=bool)

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
                raise PresetError(f"preset {where}: unknown key {key!r}" + _closest(key, TOP_KEYS))
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
            rows.append((name, f.name, default, _range_text(m), m["doc"]))
    return rows
