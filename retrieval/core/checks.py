"""Input validation shared by every estimator and command.

Messages follow one pattern, naming the offending value and what was expected, e.g.
"The 'n_clusters' parameter of KMeansVocabulary must be an int in the range [1, inf). Got 0 instead."
Never use ``assert`` for user input.
"""

from __future__ import annotations

import numbers

import numpy as np


class NotFittedError(ValueError, AttributeError):
    """Raised when a learnt component is used before ``fit``."""


class ParamError(ValueError):
    """A parameter refused, as a value: ``param`` (its name in the library: ``k``, ``shards``, ``add_root``), the
    ``value`` given and what was ``expected`` (a phrase). The library's message names the parameter as the
    library does (``k=0: expected an integer >= 1.``); an edge words it in its own terms with :meth:`worded`
    (a flag on the command line, a field in the API's JSON), from these fields, never by editing the message.

    ``template``: a message of another shape, in which ``{name}`` stands for the parameter ``name`` (worded by
    the edge), ``{param}`` for ``param``, ``{value}`` / ``{expected}`` for the fields and ``{fact}`` for each
    keyword ``fact`` given (data inserted as it is, never read as a template), e.g.
    ``ParamError("add_root", True, template="{add_root} and {replace_root} exclude each other.")``.
    """

    def __init__(self, param: str, value=None, expected: str = "", *, template: str | None = None, **facts):
        self.param, self.value, self.expected, self.template = param, value, expected, template
        self.facts = facts
        super().__init__(self._text(lambda name: name, "="))

    def worded(self, names=None) -> str:
        """The message with each parameter called as ``names`` says (a mapping, or a callable name -> word;
        missing names keep their own)."""
        if names is None:
            names = {}
        word = names if callable(names) else (lambda name: names.get(name, name))
        return self._text(word, " ")

    def _text(self, word, joint: str) -> str:
        if self.template is None:
            return f"{word(self.param)}{joint}{self.value!r}: expected {self.expected}."

        class Words(dict):
            def __missing__(self, key):
                return word(key)

        return self.template.format_map(Words(self.facts, param=word(self.param), value=self.value,
                                              expected=self.expected))


def is_sparse(x) -> bool:
    """``scipy.sparse.issparse(x)``, without importing scipy.sparse (0.2 s) when no module did: nothing can be a
    sparse matrix then."""
    import sys

    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and sparse.issparse(x)


def check_is_fitted(estimator, attributes) -> None:
    """Raise :class:`NotFittedError` unless every attribute in ``attributes`` is set."""
    if isinstance(attributes, str):
        attributes = [attributes]
    missing = [a for a in attributes if getattr(estimator, a, None) is None]
    if missing:
        name = type(estimator).__name__
        raise NotFittedError(
            f"This {name} instance is not fitted yet (missing {', '.join(missing)}). "
            f"Call 'fit' with appropriate arguments before using it."
        )


def _range_text(low, high, closed) -> str:
    lo = "-inf" if low is None else str(low)
    hi = "inf" if high is None else str(high)
    left = "[" if closed in ("both", "left") and low is not None else "("
    right = "]" if closed in ("both", "right") and high is not None else ")"
    return f"{left}{lo}, {hi}{right}"


def check_scalar(value, name: str, owner: str, *, kind=numbers.Integral, low=None, high=None,
                 closed: str = "both"):
    """Check a hyper-parameter's type and range; return it unchanged.

    ``kind`` is ``numbers.Integral`` or ``numbers.Real``; ``closed`` is one of
    "both", "left", "right", "neither".
    """
    kind_name = "an int" if kind is numbers.Integral else "a float"
    ok_type = isinstance(value, kind) and not isinstance(value, bool)
    if ok_type:
        if low is not None:
            if closed in ("both", "left") and value < low or closed in ("right", "neither") and value <= low:
                ok_type = False
        if high is not None:
            if closed in ("both", "right") and value > high or closed in ("left", "neither") and value >= high:
                ok_type = False
    if not ok_type:
        raise ValueError(
            f"The {name!r} parameter of {owner} must be {kind_name} in the range "
            f"{_range_text(low, high, closed)}. Got {value!r} instead."
        )
    return value


def check_choice(value, name: str, owner: str, choices):
    """Check that ``value`` is one of ``choices``; return it."""
    if value not in choices:
        opts = ", ".join(repr(c) for c in choices)
        raise ValueError(f"The {name!r} parameter of {owner} must be one of {opts}. Got {value!r} instead.")
    return value


def check_array(X, name: str = "X", *, ndim: int = 2, dtype=np.float32, n_features: int | None = None,
                min_rows: int = 0, finite: bool = True, copy: bool = False, where: str | None = None):
    """Convert ``X`` to an ndarray of ``dtype`` and check its shape and values.

    Parameters
    ----------
    X : array-like
    name : str
        How the array is named in error messages.
    ndim : int
        Required number of dimensions.
    dtype : numpy dtype or None
        Target dtype (None keeps the input dtype).
    n_features : int or None
        Required size of the last axis.
    min_rows : int
        Minimum size of the first axis.
    finite : bool
        Reject NaN and infinity.
    where : str or None
        Extra context for messages (e.g. the image path).
    """
    ctx = f" ({where})" if where else ""
    try:
        arr = np.array(X, dtype=dtype, copy=True) if copy else np.asarray(X, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}{ctx} could not be converted to an array of {np.dtype(dtype)}: {exc}") from None
    if arr.ndim != ndim:
        raise ValueError(f"{name}{ctx} must be a {ndim}-d array; got shape {arr.shape}.")
    if n_features is not None and arr.shape[-1] != n_features:
        raise ValueError(
            f"{name}{ctx} must have {n_features} columns (last axis); got shape {arr.shape}."
        )
    if arr.shape[0] < min_rows:
        raise ValueError(f"{name}{ctx} needs at least {min_rows} rows; got shape {arr.shape}.")
    if finite and arr.dtype.kind in "fc" and arr.size and not np.isfinite(arr).all():
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise ValueError(f"{name}{ctx} contains {bad} NaN or infinite values; expected finite numbers.")
    return arr


def check_random_state(random_state) -> np.random.Generator:
    """Turn ``random_state`` (None, int, or Generator) into a local ``numpy.random.Generator``.

    Never touches the global NumPy RNG.
    """
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return np.random.default_rng(random_state)
    raise ValueError(f"random_state must be None, an int or a numpy.random.Generator. Got {random_state!r} instead.")
