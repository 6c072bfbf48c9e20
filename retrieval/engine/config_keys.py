"""How a preset key is declared and checked: :func:`setting` (a key's default, type, range or choices, and
meaning, declared once as a field of a section dataclass), :class:`Section` (parsing, defaults and serialisation
shared by every section of :mod:`retrieval.engine.config`) and the one-line :class:`PresetError` of a refused
value (naming the closest valid key for a misspelled one)."""

from __future__ import annotations

import difflib
import numbers
from dataclasses import dataclass, field, fields
from typing import ClassVar


class PresetError(ValueError):
    """A preset is malformed: unknown key, wrong type, value out of range (one line naming key and value)."""


def setting(default, doc: str, *, kind=int, low=None, high=None, closed="both", choices=None, nullable=False,
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


def when_types(*types):
    return lambda section, kind: section.type in types


def when_kinds(*kinds):
    return lambda section, kind: kind in kinds


def range_text(m, preset_kind=None) -> str:
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


def closest_key(word: str, valid) -> str:
    close = difflib.get_close_matches(word, list(valid), n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (valid keys: {', '.join(valid)})"


def check_value(where: str, path: str, value, m, preset_kind):
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
        raise PresetError(f"preset {where}: {path} = {value!r} is {problem}: expected {range_text(m, preset_kind)}.")
    return float(value) if kind is float else value


@dataclass(frozen=True)
class Section:
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
                                  + closest_key(key, list(declared) + sorted(extra)))
            values[key] = check_value(where, f"{cls.section}.{key}", value, declared[key], preset_kind)
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
