"""The import structure of the packages listed in ``PACKAGES``: no import cycle among their modules (top-level
and function-local imports alike: a local import that dodges a cycle still is one) and no private name
(``from x import _name``) imported from another module. The graph is read from the source with ``ast``, so a
module need not be importable to be checked. Add a package to ``PACKAGES`` once it is clean."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: import name -> folder, as setup.py maps them
FOLDERS = {"pegasus": "pegasus", "pegasus.importers": "importers", "pegasus.quantizers": "quantizers",
           "pegasus.exporters": "exporters"}
#: the packages (import names) held to both rules
PACKAGES = ["pegasus.quantized", "pegasus.ops", "pegasus.passes", "pegasus.quantizers", "pegasus.importers",
            "pegasus.exporters"]
#: packages free of private imports whose last cycle goes through work still pending (issue 29): the cycle test is
#: expected to fail for them, strictly, so it reports the moment they are clean and the entry must move to PACKAGES
PENDING: dict[str, str] = {}
CYCLE_CHECKED = [*PACKAGES, *(pytest.param(package, marks=pytest.mark.xfail(reason=reason, strict=True))
                              for package, reason in PENDING.items())]


def module_files() -> dict[str, Path]:
    """Every module of the project by its import name (a package by its ``__init__.py``)."""
    found = {}
    for name, folder in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([name, *parts])] = path
    return found


def _source_module(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = package[:len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str]]:
    """(imported module, name taken from it or "") of every import statement anywhere in ``path``: ``from a
    import b`` is an import of module a.b when that is a module, else of a (taking the name b)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name in modules]
        elif isinstance(node, ast.ImportFrom):
            source = _source_module(module, path, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.append((submodule, "") if submodule in modules else (source, alias.name))
    return [(target, name) for target, name in found if target in modules and target != module]


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {module: {target for target, _ in imports_of(module, path, modules)} for module, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_cycles_are_found():
    """The checker itself: a two-module cycle and a three-module one are found, a chain is not."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}, "g": set()}
    assert sorted(cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


@pytest.mark.parametrize("package", CYCLE_CHECKED)
def test_no_import_cycle(package):
    graph = import_graph()
    inside = [cycle for cycle in cycles(graph) if any(_inside(module, package) for module in cycle)]
    assert not inside, f"import cycles through {package}: {inside}"


@pytest.mark.parametrize("package", [*PACKAGES, *PENDING])
def test_no_private_name_imported(package):
    modules = module_files()
    private = [f"{module} takes {name} from {target}" for module, path in modules.items() if _inside(module, package)
               for target, name in imports_of(module, path, modules)
               if name.startswith("_") and not name.startswith("__")]
    assert not private, "\n".join(private)


KERNELS = "pegasus.exporters.glow.kernels"
#: kernel families that must stay portable, and the ISA-specific ones they may not import (issue 29's layout rule):
#: an ISA path is an implementation of its own, which only the select stage sees beside the portable ones
PORTABLE, ISA_SPECIFIC = ("reference", "integer"), ("x86", "cortex_m")


def test_portable_kernels_import_no_isa_specific_kernel():
    graph = import_graph()
    offending = sorted(f"{module} imports {target}" for module, targets in graph.items() for target in targets
                       if any(_inside(module, f"{KERNELS}.{family}") for family in PORTABLE)
                       and any(_inside(target, f"{KERNELS}.{family}") for family in ISA_SPECIFIC))
    assert not offending, offending


def test_every_kernel_module_lives_in_a_family():
    """kernels/ holds only the registries and shared context; every kernel is in one family's folder."""
    loose = {module for module in module_files() if module.startswith(f"{KERNELS}.") and module.count(".") == 4}
    assert loose <= {f"{KERNELS}.{name}" for name in ("registry", "strategy", "context", "dtypes", "parameters",
                                                       "reference", "integer", "fused", "x86", "cortex_m")}, loose
