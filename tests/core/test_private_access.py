"""No module reads another object's private attribute.

An attribute ``x._name`` (one leading underscore) may be read only on ``self`` / ``cls`` / ``super()``, or by the
code of a class that defines ``_name`` itself (a class touching its own private state on another instance of it,
e.g. in its ``load`` classmethod). Everything else goes through a public name; the few exceptions are listed
below with their reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "retrieval"

ALLOWED: dict[tuple[str, str], str] = {
    # (module path relative to retrieval/, "expression"): why
    ("search/ivfadc.py", "out._init_storage"): "IVFADC.empty_like on a copy of itself; _init_storage is IVFADC's own, "
                                              "defined by its base class in search/ivf_lists.py",
    ("core/npy_threads.py", "fmt._read_array_header"): "numpy's .npy header reader, wrapped in a lock on the CPython "
                                                       "versions with gh-106905 (threads building ASTs at once)",
}


def _own_names(cls: ast.ClassDef) -> set[str]:
    """Private names a class defines: methods, class attributes, and ``self._x`` / ``cls._x`` assignments."""
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("_"):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names.add(t.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _bases_names(tree: ast.Module) -> dict[str, set[str]]:
    """Private names of every class of the module, with those of its in-module bases."""
    classes = {c.name: c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)}
    own = {name: _own_names(c) for name, c in classes.items()}

    def closure(name, seen=()):
        out = set(own.get(name, ()))
        for b in classes[name].bases:
            if isinstance(b, ast.Name) and b.id in classes and b.id not in seen:
                out |= closure(b.id, (*seen, name))
        return out

    return {name: closure(name) for name in classes}


def private_reads_in(rel: str, source: str) -> list[str]:
    """The disallowed private reads of one module's ``source`` (``rel``: its path under ``retrieval/``)."""
    tree = ast.parse(source)
    names = _bases_names(tree)
    found = []

    def visit(node, cls_names: set[str]):
        for child in ast.iter_child_nodes(node):
            inner = names.get(child.name, set()) if isinstance(child, ast.ClassDef) else cls_names
            if isinstance(child, ast.Attribute) and child.attr.startswith("_") and not child.attr.startswith("__"):
                v = child.value
                ok = (isinstance(v, ast.Name) and v.id in ("self", "cls")) or \
                    (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super") or \
                    child.attr in cls_names
                expr = ast.unparse(child)
                if not ok and (rel, expr) not in ALLOWED:
                    found.append(f"retrieval/{rel}:{child.lineno}: {expr}")
            visit(child, inner)

    visit(tree, set())
    return found


def test_no_module_reads_another_objects_private_attribute():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        found += private_reads_in(path.relative_to(ROOT).as_posix(), path.read_text("utf-8"))
    assert not found, "private attributes read from outside their class:\n" + "\n".join(found)


def test_the_check_flags_reads_of_other_objects_private_state():
    """A read of another object's private attribute is flagged (in a function, a method of another class, a
    module-level statement); a class's own private state, on self or on another instance, is not."""
    src = ("def f(index):\n    return index._backend\n"
           "class A:\n    def g(self, b):\n        return b._hidden, self._own\n"
           "class B:\n    def __init__(self):\n        self._x = 1\n    @classmethod\n"
           "    def load(cls):\n        obj = cls()\n        obj._x = 2\n        return obj._x\n"
           "y = B()._x\n")
    found = private_reads_in("example.py", src)
    assert found == ["retrieval/example.py:2: index._backend", "retrieval/example.py:5: b._hidden",
                     "retrieval/example.py:14: B()._x"], found


def private_imports_in(rel: str, text: str) -> list[str]:
    """``from retrieval.X import _name`` in module ``rel``: a private name of another module imported. A private
    *module* (``_ivfadc_kernels``: compiled kernels kept apart so that they load only when used) may be imported;
    a name used by two modules is public."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("retrieval"):
            for alias in node.names:
                if not alias.name.startswith("_") or alias.name.startswith("__"):
                    continue
                as_module = ROOT.parent / (node.module.replace(".", "/") + "/" + alias.name)
                if as_module.with_suffix(".py").is_file() or as_module.is_dir():
                    continue
                found.append(f"retrieval/{rel}:{node.lineno}: from {node.module} import {alias.name}")
    return found


def test_no_module_imports_another_modules_private_name():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        found += private_imports_in(path.relative_to(ROOT).as_posix(), path.read_text("utf-8"))
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def test_the_check_flags_private_names_imported_but_not_private_modules():
    src = ("from retrieval.codes.scan import _sift_down, heap_sort_inplace\n"
           "from retrieval.search import _ivfadc_numpy\n"
           "from retrieval.features.extractor import config_key as _config_key\n")
    assert private_imports_in("example.py", src) == [
        "retrieval/example.py:1: from retrieval.codes.scan import _sift_down"]
