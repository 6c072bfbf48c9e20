"""Names of a package imported from their submodule on first use (PEP 562): a query loads what it needs, no more."""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict, namespace: dict):
    """``(__getattr__, __dir__)`` for the package ``package`` whose public names ``exports`` maps to the submodule
    defining each; a name is imported on first use and then kept in the package's ``namespace`` (its globals)."""

    def __getattr__(name):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(list(namespace) + list(exports))

    return __getattr__, __dir__
