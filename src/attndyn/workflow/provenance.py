"""Where a result came from, for a reader who cites it: the code, the date, the command and the machine.

``provenance()`` is recorded in each claim's ``result.json`` when the claim is computed (in the process
that computes it, so a figure worker's own command line never replaces the user's), and the report
shows it with a "cite this" block (:data:`CITATION`). Nothing here reaches the network: the commit is
read from the package's own git checkout where there is one (``None`` for an installed wheel, whose
``version`` then says what ran), with ``+modified`` where tracked files differ from it.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from attndyn import __version__


@functools.lru_cache(maxsize=1)
def commit() -> str | None:
    """The git commit of attndyn's source tree (``+modified`` where tracked files differ), or None."""
    source = Path(__file__).resolve().parents[1]
    try:
        run = functools.partial(subprocess.run, cwd=source, capture_output=True, text=True, timeout=10, check=False)
        head = run(["git", "rev-parse", "--show-toplevel", "HEAD"])
        if head.returncode != 0:
            return None
        top, sha = head.stdout.split()
        if Path(top).resolve() not in source.parents:  # a git repository that merely contains an installed copy
            return None
        dirty = run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."]).stdout.strip()
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return sha + ("+modified" if dirty else "")


@functools.lru_cache(maxsize=1)
def machine() -> dict:
    """The machine, in the words a methods section uses: OS, processor, cores, Python, NumPy and torch."""

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {
        "os": f"{platform.system()} {platform.release()}",
        "processor": platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": version("numpy"),
        "torch": version("torch"),
    }


def command_line(argv: list[str] | None = None) -> str:
    """The command as the user typed it: ``attndyn ...`` for the console script, else the interpreter's argv."""
    argv = list(sys.argv if argv is None else argv)
    if argv and Path(argv[0]).name in ("attndyn", "__main__.py"):
        argv = ["attndyn", *argv[1:]]
    return shlex.join(argv) if argv else ""


def provenance() -> dict:
    """This process's record: version, commit, UTC date, command line and machine."""
    return {
        "version": __version__,
        "commit": commit(),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command_line(),
        "machine": machine(),
    }


CITATION = """@inproceedings{geshkovski2023emergence,
  title     = {The emergence of clusters in self-attention dynamics},
  author    = {Geshkovski, Borjan and Letrouit, Cyril and Polyanskiy, Yury and Rigollet, Philippe},
  booktitle = {Advances in Neural Information Processing Systems},
  volume    = {36},
  year      = {2023},
  note      = {arXiv:2305.05465}
}"""


def software_citation(record: dict) -> str:
    """BibTeX for attndyn at the version and commit of ``record`` (a :func:`provenance` dict)."""
    commit_ = record.get("commit")
    note = f"version {record.get('version')}" + (f", commit {commit_}" if commit_ else "")
    year = str(record.get("date", ""))[:4] or "2026"
    return (
        "@software{attndyn,\n"
        "  title   = {attndyn: self-attention as an interacting particle system},\n"
        f"  year    = {{{year}}},\n"
        f"  version = {{{record.get('version')}}},\n"
        f"  note    = {{{note}}}\n"
        "}"
    )
