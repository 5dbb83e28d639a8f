"""Installable as a package: the wheel holds the library and the command, nothing else (issue 12).

The wheel is built offline from a copy of the tree (no build isolation, no index), installed into a
scratch folder without dependencies (they come from the test environment), and run from there.
"""

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ["simulate", "meanfield", "sweep", "analyze", "list", "reproduce", "report", "judge", "checkpoint", "intervene", "atlas", "models"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools", reason="building the wheel offline needs setuptools in the environment")
    src = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("attndyn-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return target


def run_installed(target: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(target), "COLUMNS": "80"}
    return subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=target, timeout=120)


def test_wheel_holds_the_package_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"attndyn", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    assert "attndyn/app/cli.py" in names
    assert "attndyn/claims/polytope.py" in names
    assert "attndyn/py.typed" in names  # PEP 561: type checkers read the package's annotations
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names), names
    for layer in ("core", "analysis", "theory", "models", "workflow", "claims", "app"):
        assert f"attndyn/{layer}/__init__.py" in names
    assert not [n for n in names if n.startswith(("tests/", "examples/", "docs/", "benchmarks/")) or "__pycache__" in n]
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "attndyn = attndyn.__main__:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_the_installed_library_and_module_run(installed):
    where = run_installed(installed, sys.executable, "-c", "import attndyn; print(attndyn.__file__, attndyn.__version__)")
    assert where.returncode == 0, where.stderr
    path, version = where.stdout.split()
    assert Path(path).is_relative_to(installed)
    assert version == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    listed = run_installed(installed, sys.executable, "-m", "attndyn", "list")
    assert listed.returncode == 0, listed.stderr
    assert "polytope" in listed.stdout


def test_the_command_lists_every_command_on_one_line(installed):
    script = installed / "bin" / "attndyn"
    assert script.is_file()
    helped = run_installed(installed, str(script), "--help")
    assert helped.returncode == 0, helped.stderr
    from attndyn.app.cli import app

    registered = [c.name or c.callback.__name__ for c in app.registered_commands]
    assert sorted(registered) == sorted(COMMANDS)
    lines = helped.stdout.splitlines()
    for name in COMMANDS:
        rows = [line for line in lines if line.strip("│ ").startswith(name + " ")]
        assert len(rows) == 1, (name, helped.stdout)
        index = lines.index(rows[0])
        # one line each: the next row starts a new command (or closes the box)
        follower = lines[index + 1].strip("│ ")
        assert follower == "" or follower.split()[0] in COMMANDS or follower.startswith("╰"), (name, follower)
