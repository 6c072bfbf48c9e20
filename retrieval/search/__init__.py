"""Query -> shortlist: IVFADC (coarse quantiser + residual PQ), the BoW inverted file scored with l_p or the
query-adaptive delta_p, and kernel search (KPCA + PQ/LSH with exact re-ranking, exact search by the
Cauchy-Schwarz bound)."""

_EXPORTS = {
    "InvertedFile": "invfile",
    "IVFADC": "ivfadc",
    "ExactKernelSearch": "kernel_exact",
    "KPCALSH": "kernel_search",
    "KPCAPQ": "kernel_search",
}


def __getattr__(name):
    """Import a submodule only when one of its names is first used (a query loads what it needs, no more)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))


__all__ = ["IVFADC", "InvertedFile", "ExactKernelSearch", "KPCALSH", "KPCAPQ"]
