"""The package's layers: every module belongs to one, and imports flow downward only (issue 19).

core <- analysis, theory <- models <- workflow <- claims <- app. A module may import its own layer
and the layers its row below allows; nothing imports app; the old flat paths kept for users
(``attndyn.runs``, ``attndyn.sweep``, ...) are never imported from inside the package. Lazy imports
inside functions count as imports.
"""

import ast
import importlib
from pathlib import Path

import pytest

import attndyn as ad

SRC = Path(ad.__file__).parent
LAYERS = ("core", "analysis", "theory", "models", "workflow", "claims", "app")
ALLOWED = {
    "core": {"core"},
    "analysis": {"core", "analysis"},
    "theory": {"core", "theory"},
    "models": {"core", "analysis", "models"},
    "workflow": {"core", "analysis", "theory", "models", "workflow"},
    "claims": {"core", "analysis", "theory", "models", "workflow", "claims"},
    "app": set(LAYERS),
}
# The flat layout's documented paths, kept as aliases of (or a re-export from) their new homes.
OLD_PATHS = {
    "attndyn.runs": "attndyn.workflow.runs",
    "attndyn.meanfield": "attndyn.theory.meanfield",
    "attndyn.numerics": "attndyn.analysis.numerics",
    "attndyn.metastability": "attndyn.analysis.metastability",
    "attndyn.noise": "attndyn.core.noise",
}
TOP_LEVEL = {"__init__", "__main__", "sweep"} | {p.rsplit(".", 1)[1] for p in OLD_PATHS}


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def from_target(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of ``from ... import`` in ``package`` (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Absolute names of the attndyn modules (or packages) a source imports, lazily or not."""
    package = module if is_package else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            target = from_target(node, package)
            names = [f"{target}.{a.name}" for a in node.names]
            out.update([target, *names])
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m == "attndyn" or m.startswith("attndyn.")}


def layer_of(name: str) -> str | None:
    """The layer of an attndyn module name; the root package is the facade of core."""
    parts = name.split(".")
    if len(parts) == 1:
        return "core"
    return parts[1] if parts[1] in LAYERS else None


def violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    own = layer_of(module)
    bad = []
    for target in sorted(imported_modules(source, module, is_package=is_package)):
        if target in OLD_PATHS or target == "attndyn.sweep":
            bad.append(f"{module} imports the old path {target}")
            continue
        layer = layer_of(target)
        if layer is None:  # a name imported from the root facade (``from attndyn import Model``)
            layer = "core"
        if layer not in ALLOWED[own]:
            bad.append(f"{module} ({own}) imports {target} ({layer})")
    return bad


def package_modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_every_module_belongs_to_a_layer():
    loose = [p.relative_to(SRC) for p in package_modules() if len(p.relative_to(SRC).parts) == 1 and p.stem not in TOP_LEVEL]
    assert not loose, f"modules outside every layer: {loose}"
    assert {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(LAYERS)


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_flow_downward_only(layer):
    bad = []
    for path in sorted((SRC / layer).rglob("*.py")):
        bad += violations(path.read_text(), module_name(path), is_package=path.name == "__init__.py")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("layer", LAYERS)
def test_every_layer_states_its_contract(layer):
    doc = importlib.import_module(f"attndyn.{layer}").__doc__ or ""
    assert "Layer contract" in doc
    assert "import" in doc.split("Layer contract", 1)[1].lower()


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("attndyn.core.dynamics", "from attndyn.analysis import clusters"),
        ("attndyn.analysis.clusters", "def f():\n    from attndyn.theory import closed_forms"),
        ("attndyn.theory.meanfield", "from ..analysis.spectra import regime"),
        ("attndyn.models.bert", "import attndyn.workflow.plots"),
        ("attndyn.workflow.runs", "from attndyn.claims import EXPERIMENTS"),
        ("attndyn.claims.sphere", "from attndyn.app import report"),
        ("attndyn.claims.sphere", "from attndyn import sweep"),
        ("attndyn.app.cli", "from attndyn.runs import execute"),
    ],
)
def test_the_rule_catches_an_upward_or_sideways_import(module, source):
    assert violations(source, module)


def test_the_rule_allows_what_it_should():
    assert not violations("from attndyn.core.dynamics import Model\nimport attndyn as ad", "attndyn.analysis.spectra")
    assert not violations("from . import circle\nfrom ..workflow import plots", "attndyn.claims.sphere")


@pytest.mark.parametrize(("old", "new"), sorted(OLD_PATHS.items()))
def test_old_paths_are_their_new_homes(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_old_sweep_path_re_exports_the_sweep_api():
    import attndyn.sweep as old
    from attndyn.app import ledger, sweep_driver, sweep_results
    from attndyn.workflow import grid, measures, tasks

    for name, home in [("load", sweep_results), ("export", sweep_results), ("run", sweep_driver), ("Ledger", ledger)]:
        assert getattr(old, name) is getattr(home, name)
    for name, home in [("parse", grid), ("load_spec", grid), ("MEASURES", measures), ("run_task", tasks)]:
        assert getattr(old, name) is getattr(home, name)
    assert set(old.__all__) <= set(dir(old))


def test_the_public_names_stay_at_the_top():
    import attndyn.analysis
    import attndyn.theory
    import attndyn.theory.closed_forms
    from attndyn.core import dynamics, longtime, simulation, solvers, weights

    for name, home in [("simulate", simulation), ("residual_layers", simulation), ("Trajectory", simulation), ("Model", dynamics),
                       ("velocity", dynamics), ("Weights", weights), ("RK4", solvers), ("Dopri5", solvers), ("AdaptiveStep", solvers),
                       ("simulate_long", longtime)]:  # fmt: skip
        assert getattr(ad, name) is getattr(home, name)
    assert ad.analyze is attndyn.analysis.analyze
    assert attndyn.theory.growth_rates is attndyn.theory.closed_forms.growth_rates


@pytest.mark.parametrize("module", ["clusters", "geometry", "lowrank"])
def test_analysis_modules_do_not_use_torch(module):
    tree = ast.parse((SRC / "analysis" / f"{module}.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(m == "torch" or m.startswith("torch.") for m in names)


def test_solvers_know_nothing_about_attention():
    imports = imported_modules((SRC / "core" / "solvers.py").read_text(), "attndyn.core.solvers")
    # only the leaf module of option names (strings, no torch, no attndyn import), which the config schema shares
    assert {i for i in imports if not i.startswith("attndyn.core.names")} == set()
    assert imported_modules((SRC / "core" / "names.py").read_text(), "attndyn.core.names") == set()


def test_report_does_not_import_the_claim_registry():
    imports = imported_modules((SRC / "app" / "report.py").read_text(), "attndyn.app.report")
    assert not any(i.startswith("attndyn.claims") for i in imports)


# --- no import circles (issue 48 item 4) ------------------------------------------------------------------
#
# Every import statement counts, wherever it stands: at the top, inside a function (deferred) or under
# ``if TYPE_CHECKING:`` (a circle of annotations is still two modules that each need the other to be read).


def module_imports(source: str, module: str, modules: set[str], *, is_package: bool = False) -> set[str]:
    """The modules of ``modules`` that ``source`` imports: ``from a.b import c`` is ``a.b.c`` when that is a module,
    else ``a.b`` (a name defined there)."""
    package = module if is_package else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            target = from_target(node, package)
            out.update(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in modules and m != module}


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the package modules it imports (lazily or not)."""
    paths = {module_name(p): p for p in package_modules()}
    return {m: module_imports(p.read_text(), m, set(paths), is_package=p.name == "__init__.py") for m, p in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every module of one
    imports, directly or through the others, every other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_module_imports_itself_back():
    graph = import_graph()
    found = cycles(graph)
    lines = [" <-> ".join(c) + ": " + "; ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a]) if b in c) for c in found]
    assert not found, "import circles:\n" + "\n".join(lines)


def test_the_circle_finder_sees_deferred_and_annotation_only_imports():
    modules = {"attndyn.core.a", "attndyn.core.b", "attndyn.core.c"}
    deferred = "def f():\n    from attndyn.core import b"
    annotation = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from attndyn.core.a import Model"
    graph = {
        "attndyn.core.a": module_imports(deferred, "attndyn.core.a", modules),
        "attndyn.core.b": module_imports(annotation, "attndyn.core.b", modules),
        "attndyn.core.c": module_imports("from . import a", "attndyn.core.c", modules),
    }
    assert graph == {"attndyn.core.a": {"attndyn.core.b"}, "attndyn.core.b": {"attndyn.core.a"}, "attndyn.core.c": {"attndyn.core.a"}}
    assert cycles(graph) == [["attndyn.core.a", "attndyn.core.b"]]
    assert cycles(graph | {"attndyn.core.b": set()}) == []
