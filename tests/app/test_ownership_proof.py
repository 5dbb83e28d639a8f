"""Ownership that cannot be fooled (issue 38 findings 1-6's ledger cases, issue 35 finding 5's writes
through links): every case of one table runs the real command line in-process with the foreign
trees it names hashed before and after (links hashed as links, never followed), and counts as data
loss when one of them changed. Each case failed (exit 0 with a foreign file gone or overwritten,
foreign code run, or a silent wrong result) on the code before this change."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from attndyn.app.cli import entry
from attndyn.workflow import ownership
from tests.app.test_bad_input import CONFIG, MEANFIELD, SWEEP


def lhash(path: Path) -> dict[str, str]:
    """Every entry under ``path`` (itself included): a file's SHA-256, a link's target, 'dir'; links not followed."""
    out = {}

    def one(p: Path, rel: str):
        if os.path.islink(p):
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
            for child in sorted(os.listdir(p)):
                one(p / child, f"{rel}/{child}")
        elif p.exists() and not p.is_file():
            out[rel] = f"special:{os.lstat(p).st_ino}"  # a FIFO or socket: never opened (a FIFO would block)
        elif p.exists():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "absent"

    one(Path(path), ".")
    return out


PLANT = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    const char *path = getenv("ATTNDYN_PLANT_MARK");
    if (path) { FILE *f = fopen(path, "w"); if (f) { fputs("foreign code ran\n", f); fclose(f); } }
}
"""


class Ctx:
    """A case's scratch folder: copies of a finished run and sweep, foreign files on demand."""

    def __init__(self, root: Path, pristine: Path, monkeypatch, finalize: Callable[[Callable[[], None]], None] = lambda f: None):
        self.root, self.pristine, self.mp = root, pristine, monkeypatch
        self.checks: list[Callable[[], None]] = []
        self.finalize = finalize  # what must run whether the case passed or not (unmounting)

    def file(self, rel: str, text: str = "a researcher's file\n") -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def config(self) -> str:
        return str(self.file("c.toml", CONFIG))

    def meanfield(self) -> str:
        return str(self.file("m.toml", MEANFIELD))

    def sweep_file(self) -> str:
        self.file("base.toml", CONFIG)
        return str(self.file("sweep.toml", SWEEP))

    def copy(self, what: str) -> Path:
        target = self.root / what
        shutil.copytree(self.pristine / what, target, symlinks=True)
        return target

    def foreign_folder(self, name: str, *names: str) -> Path:
        """A folder of a researcher's files, named like attndyn's own (written before markers, or by hand)."""
        for n in names or ("config.json", "summary.json", "notes.txt"):
            self.file(f"{name}/{n}", f"the researcher's {n}\n")
        return self.root / name

    def ledger(self, sql: str) -> Path:
        sweep = self.copy("swept")
        db = sqlite3.connect(sweep / "ledger.sqlite")
        db.executescript(sql)
        db.commit()
        db.close()
        return sweep

    def planted(self, cache: Path, mode: int) -> Path:
        """The planted library under the kernel's own name in ``cache`` (mode ``mode``); returns the file it writes when run."""
        from attndyn.core import compiled

        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if cc is None:
            pytest.skip("no C compiler to build the planted library")
        import subprocess

        self.file("plant.c", PLANT)
        cache.mkdir(mode=0o700)
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(self.root / "plant.so"), str(self.root / "plant.c")], check=True)
        compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
        tag = hashlib.sha256((compiled.SOURCE + compiler + compiled._machine()).encode()).hexdigest()[:16]
        shutil.copy(self.root / "plant.so", cache / f"attndyn_small_{tag}.so")
        if mode & 0o022:  # whoever can write into the folder forges the recorded hash too
            (cache / f"attndyn_small_{tag}.so.sha256").write_text(hashlib.sha256((self.root / "plant.so").read_bytes()).hexdigest() + "\n")
        # (a private folder: the library was planted while it was open, before hashes were recorded)
        cache.chmod(mode)
        mark = self.root / "ran.txt"
        self.mp.setenv("ATTNDYN_CACHE", str(cache))
        self.mp.setenv("ATTNDYN_PLANT_MARK", str(mark))
        self.mp.setenv("ATTNDYN_COMPILED", "1")
        self.mp.setattr(compiled, "STATUS", {"library": None, "reason": "not tried"})
        self.mp.setattr(compiled, "_PRIVATE", None, raising=False)

        def no_foreign_code():
            assert not mark.exists(), "the planted library's code ran"
            assert compiled.STATUS["reason"] == "compiled", compiled.STATUS["reason"]

        self.checks.append(no_foreign_code)
        return cache


@dataclass
class Case:
    id: str
    category: str
    build: Callable[[Ctx], tuple[list[str], list[Path]]]  # the command and the foreign trees it must leave as they are
    code: int = 2
    says: str = ""


def _marker(folder: Path, **record) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ownership.MARKER).write_text(json.dumps(record))


def _f1_export(c: Ctx):
    sweep = c.copy("swept")
    for name in (ownership.MARKER, "driver.lock"):  # a sweep folder as it looked before markers
        (sweep / name).unlink()
    return ["sweep", "export", str(sweep), "--format", "csv"], [c.file("swept/results.csv", "my,own\n1,2\n")]


def _f2_previous(c: Ctx, name: str):
    run = c.copy("run")
    return ["simulate", c.config(), "--out", str(run)], [c.file(f"run/.previous/{name}", "saved by the researcher\n")]


def _f3_outside(c: Ctx):
    victim = c.file("victim.txt", "precious\n")
    _marker(c.root / "o", kind="run", format=2, files={"../victim.txt": ownership.digest(victim)}, previous={})
    return ["simulate", c.config(), "--out", str(c.root / "o")], [victim]


def _forged(c: Ctx, how: str):
    """Issue 51 finding 1: a marker listing the user's notes.txt with its true SHA-256, written by someone else."""
    import hmac

    if how == "edited":
        ownership.claim(c.root / "o", "run", "test")
    notes = c.file("o/notes.txt", "the researcher's notes\n")
    true = ownership.digest(notes)
    record = {
        "kind": "run",
        "format": ownership.FORMAT,
        "version": "0.4.0",
        "writer": "attndyn simulate",
        "files": {"notes.txt": true},
        "previous": {},
    }
    if how == "format-2":
        record["format"] = 2
    elif how == "previous":  # the run after a move would delete what the marker says it moved aside
        c.file("o/.previous/notes.txt", "the researcher's notes\n")
        record["previous"], record["files"] = {"notes.txt": true}, {}
    elif how == "other-key":
        body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        record["mac"] = hmac.new(os.urandom(32), body, "sha256").hexdigest()
    elif how == "edited":  # a marker attndyn signed, with the user's file added afterwards (the mac kept)
        record = json.loads((c.root / "o" / ownership.MARKER).read_text())
        record["files"]["notes.txt"] = true
    elif how == "replayed":  # a mac copied from a real marker onto other content
        record["mac"] = json.loads((c.pristine / "run" / ownership.MARKER).read_text())["mac"]
    _marker(c.root / "o", **record)
    return ["simulate", c.config(), "--out", str(c.root / "o")], [c.root / "o"]


def _forged_then_adopted(c: Ctx):
    argv, _ = _forged(c, "format-2")
    notes = lhash(c.root / "o" / "notes.txt")

    def moved_not_deleted():
        (adopted,) = (c.root / "o").glob("adopted-*")
        assert lhash(adopted / "notes.txt") == notes

    c.checks.append(moved_not_deleted)
    return [*argv, "--force-adopt"], []


def _other_key(c: Ctx):
    run = c.copy("run")  # signed with this user's key; then the key changes (another machine, HOME, container)
    c.mp.setenv("XDG_CONFIG_HOME", str(c.root / "another-config"))
    return ["simulate", c.config(), "--out", str(run)], [run]


def _shared_key(c: Ctx, mode: int):
    config = c.root / "config"
    c.mp.setenv("XDG_CONFIG_HOME", str(config))
    ownership._key()  # made on first use, 0600
    assert stat.S_IMODE(os.stat(ownership.key_path()).st_mode) == 0o600
    os.chmod(ownership.key_path(), mode)
    return ["simulate", c.config(), "--out", str(c.root / "o")], [config]


def _link(c: Ctx, link: Path, target: Path) -> Path:
    if os.path.lexists(link):
        shutil.rmtree(link) if link.is_dir() and not link.is_symlink() else link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def _report_with_link(c: Ctx, which: str):
    report = c.root / "report"
    owner = ownership.claim(report, "report", "test")
    owner.mkdir("runs") if hasattr(owner, "mkdir") else (report / "runs").mkdir()  # (the second: the code before markers recorded hashes)
    foreign = c.foreign_folder("theirs", "config.json", "result.json", "summary.json", "arrays.npz")
    if which == "runs":
        shutil.rmtree(report / "runs")
        _link(c, report / "runs", foreign)
    else:
        _link(c, report / "runs" / "model-equivalence", foreign)
    return ["reproduce", "model-equivalence", "--quick", "--out", str(report)], [foreign]


def _checkpoint_figures_link(c: Ctx):
    out = c.root / "ck"
    ownership.claim(out, "checkpoint", "test")
    foreign = c.foreign_folder("theirs", "a.png", "notes.txt")
    _link(c, out / "figures", foreign)
    return ["checkpoint", "minilm", "--out", str(out)], [foreign]


def _ledger_link(c: Ctx, command: str):
    sweep = c.copy("swept")
    foreign = c.file("theirs.sqlite", "")  # an empty file: SQLite would make it a ledger
    _link(c, sweep / "ledger.sqlite", foreign)
    argv = ["sweep", "status", str(sweep)] if command == "status" else ["sweep", c.sweep_file(), "--out", str(sweep), "--workers", "0"]
    return argv, [foreign]


def _repair(c: Ctx):
    sweep = c.ledger("DELETE FROM results;")

    def complete():
        assert entry(["sweep", "export", str(sweep), "--format", "csv"]) == 0
        text = (sweep / "results.csv").read_text()
        assert "nan" not in text.lower()
        assert len(text.splitlines()) > 2

    c.checks.append(complete)
    return ["sweep", c.sweep_file(), "--out", str(sweep), "--workers", "0", "--repair"], []


def _force_adopt(c: Ctx, argv_of):
    page = c.file("site/index.html", "<h1>my site</h1>\n")
    before = lhash(page)
    argv = argv_of(c)

    def moved_not_deleted():
        (adopted,) = (c.root / "site").glob("adopted-*")
        assert lhash(adopted / "index.html") == before

    c.checks.append(moved_not_deleted)
    return argv, []


def _adopt_refused(c: Ctx, how: str):
    """Issue 51 finding 2: --force-adopt on what is not the user's own: refused, nothing moved."""
    site = c.root / "site"
    c.file("site/index.html", "<h1>my site</h1>\n")
    if how == "parent-of-home":
        site = Path(os.environ["HOME"]).parent
    elif how == "current-folder-parent":
        (site / "project").mkdir()
        c.mp.chdir(site / "project")
    elif how == "current-folder":
        c.mp.chdir(site)
    elif how in ("sticky", "world-writable"):
        c.file("site/theirs/notes.txt")
        site.chmod(0o1777 if how == "sticky" else 0o777)
        c.checks.append(lambda: site.chmod(0o755))
    elif how == "fifo":
        os.mkfifo(site / "pipe")
    elif how == "socket":
        import socket

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(site / "s"))
        c.checks.append(sock.close)
    elif how == "x11-unix":  # /tmp's .X11-unix, inside the folder adopted: a shared folder holding a live socket
        import socket

        (site / ".X11-unix").mkdir()
        (site / ".X11-unix").chmod(0o1777)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(site / ".X11-unix" / "X0"))
        c.checks.append(sock.close)
    elif how == "device":
        try:
            os.mknod(site / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except (PermissionError, AttributeError):
            pytest.skip("making a device node needs root (CAP_MKNOD)")
    elif how == "other-user":
        if os.getuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(c.file("site/sub/theirs.txt"), 4321, -1)
    elif how == "mount-point":
        real = os.path.ismount
        c.mp.setattr(os.path, "ismount", lambda p: os.path.realpath(p) == os.path.realpath(site) or real(p))
    elif how == "mount-inside":  # a real bind mount of another folder of the same file system (same device number)
        (site / "disk").mkdir()
        c.file("elsewhere/theirs.txt")
        if os.getuid() != 0 or subprocess.run(["mount", "--bind", str(c.root / "elsewhere"), str(site / "disk")],
                                              capture_output=True, check=False).returncode != 0:  # fmt: skip
            pytest.skip("a bind mount needs root and a container that allows mount")
        c.finalize(lambda: subprocess.run(["umount", str(site / "disk")], check=True))
    return ["simulate", c.config(), "--out", str(site), "--force-adopt"], [site]


def _kernel(c: Ctx, mode: int):
    cache = c.planted(c.root / "kernels", mode)
    return ["simulate", c.config(), "--out", str(c.root / "o")], ([cache] if mode & 0o022 else [])


CASES = [
    # --- issue 38 finding 1: a folder that merely looks like attndyn's --------------------------
    Case("f1-reproduce-into-a-user-page", "adopted by resemblance",
         lambda c: (["reproduce", "model-equivalence", "--quick", "--out", str(c.root / "site")], [c.file("site/index.html", "<h1>my site</h1>")]),
         says="not written by attndyn"),
    Case("f1-simulate-onto-a-user-config", "adopted by resemblance",
         lambda c: (["simulate", c.config(), "--out", str(c.root / "o")], [c.file("o/config.json", "{}")]), says="--force-adopt"),
    Case("f1-simulate-onto-a-user-page", "adopted by resemblance",
         lambda c: (["simulate", c.config(), "--out", str(c.root / "o")], [c.file("o/index.html")]), says="index.html"),
    Case("f1-meanfield-onto-a-user-figure", "adopted by resemblance",
         lambda c: (["meanfield", c.meanfield(), "--out", str(c.root / "o")], [c.file("o/density.png")]), says="density.png"),
    Case("f1-checkpoint-onto-a-user-page", "adopted by resemblance",
         lambda c: (["checkpoint", "minilm", "--out", str(c.root / "o")], [c.file("o/index.html")]), says="index.html"),
    Case("f1-export-onto-a-user-csv", "adopted by resemblance", _f1_export, says="not written by attndyn"),
    Case("f1-rerun-over-a-changed-file", "adopted by resemblance",
         lambda c: (["simulate", c.config(), "--out", str(c.copy("run"))], [c.file("run/config.json", '{"mine": 1}')]), says="changed"),
    # --- finding 2: .previous/ trusted whoever filled it -----------------------------------------
    Case("f2-user-file-in-previous", ".previous", lambda c: _f2_previous(c, "notes.txt"), code=0),
    Case("f2-user-file-in-previous-named-like-attndyns", ".previous", lambda c: _f2_previous(c, "config.json"), code=0),
    Case("f2-folder-holding-only-a-user-previous", ".previous",
         lambda c: (["simulate", c.config(), "--out", str(c.root / "o")], [c.file("o/.previous/notes.txt")]), says=".previous"),
    # --- finding 3: a marker is believed ----------------------------------------------------------
    Case("f3-hand-written-marker-naming-a-user-file", "marker believed",
         lambda c: (_marker(c.root / "o", kind="run", files=["notes.txt"]), ["simulate", c.config(), "--out", str(c.root / "o")])[1:]
         + ([c.file("o/notes.txt")],), says="does not verify"),
    Case("f3-hand-written-marker-with-an-empty-list", "marker believed",
         lambda c: (_marker(c.root / "o", kind="run", files=[]), ["simulate", c.config(), "--out", str(c.root / "o")])[1:]
         + ([c.file("o/config.json", "{}"), c.file("o/trajectory.png", "png")],), says="does not verify"),
    Case("f3-marker-with-a-wrong-hash", "marker believed",
         lambda c: (_marker(c.root / "o", kind="run", format=2, files={"config.json": "0" * 64}, previous={}),
                    ["simulate", c.config(), "--out", str(c.root / "o")])[1:] + ([c.file("o/config.json", "{}")],), says="changed"),
    Case("f3-marker-naming-a-path-outside", "marker believed", _f3_outside, says="does not verify"),
    # --- issue 51 finding 1: a marker anyone can write ---------------------------------------------
    *(Case(f"k-forged-marker-{how}", "marker signed", lambda c, how=how: _forged(c, how), says="does not verify")
      for how in ("format-2", "no-mac", "other-key", "edited", "replayed", "previous")),
    Case("k-folder-signed-under-another-key", "marker signed", _other_key, says="another key"),
    Case("k-old-format-adopted-with-force-adopt", "marker signed", _forged_then_adopted, code=0),
    *(Case(f"k-key-readable-{mode:o}", "marker signed", lambda c, mode=mode: _shared_key(c, mode), says="can be read by others")
      for mode in (0o640, 0o604)),
    # --- finding 4: export onto its own sources ---------------------------------------------------
    *(Case(f"f4-export-onto-the-{name.replace('.', '-')}", "export onto its sources",
           lambda c, name=name: (["sweep", "export", str(c.copy("swept")), "--format", "csv", "--out", str(c.root / "swept" / name)],
                                 [c.root / "swept" / n for n in ("ledger.sqlite", ownership.MARKER)]), says="sweep's own")
      for name in ("ledger.sqlite", "ledger.sqlite/results.csv", ownership.MARKER, "driver.lock")),
    # --- finding 5: foreign code from the kernel cache --------------------------------------------
    Case("f5-planted-library-in-a-world-writable-cache", "kernel cache", lambda c: _kernel(c, 0o777), code=0),
    Case("f5-planted-library-in-a-private-cache", "kernel cache", lambda c: _kernel(c, 0o700), code=0),
    # --- finding 6: ledgers that lost tables or rows ----------------------------------------------
    Case("f6-ledger-without-tasks-status", "ledger", lambda c: (["sweep", "status", str(c.ledger("DROP TABLE tasks;"))], []), says="tasks table"),
    Case("f6-ledger-without-tasks-rerun", "ledger",
         lambda c: (["sweep", c.sweep_file(), "--out", str(c.ledger("DROP TABLE tasks;")), "--workers", "0"], []), says="--repair"),
    Case("f6-ledger-without-results-export", "ledger",
         lambda c: (["sweep", "export", str(c.ledger("DELETE FROM results;")), "--format", "csv"], []), says="no results row"),
    Case("f6-ledger-without-results-status", "ledger", lambda c: (["sweep", "status", str(c.ledger("DELETE FROM results;"))], []), says="results"),
    Case("f6-ledger-missing-a-task-row", "ledger",
         lambda c: (["sweep", "status", str(c.ledger("DELETE FROM tasks WHERE task_id = 1;"))], []), says="1 task rows"),
    Case("f6-ledger-repaired", "ledger", _repair, code=0),
    # --- issue 35 finding 5: links under an output folder ----------------------------------------
    Case("l-claim-run-folder-is-a-link", "links", lambda c: _report_with_link(c, "claim"), says="symbolic link"),
    Case("l-runs-folder-is-a-link", "links", lambda c: _report_with_link(c, "runs"), says="symbolic link"),
    Case("l-checkpoint-figures-is-a-link", "links", _checkpoint_figures_link, says="figures"),
    Case("l-meanfield-out-is-a-link", "links",
         lambda c: (["meanfield", c.meanfield(), "--out", str(_link(c, c.root / "o", c.foreign_folder("theirs", "density.npz", "config.json")))],
                    [c.root / "theirs"]), says="symbolic link"),
    Case("l-simulate-out-is-a-link-to-a-run", "links",
         lambda c: (["simulate", c.config(), "--out", str(_link(c, c.root / "o", c.copy("run")))], [c.root / "run"]), says="symbolic link"),
    Case("l-ledger-is-a-link-rerun", "links", lambda c: _ledger_link(c, "run"), says="ledger.sqlite"),
    Case("l-ledger-is-a-link-status", "links", lambda c: _ledger_link(c, "status"), says="symbolic link"),
    Case("l-marker-is-a-link", "links",
         lambda c: (["simulate", c.config(), "--out", str(c.copy("run"))],
                    [_link(c, c.root / "run" / ownership.MARKER, c.file("theirs.json", (c.pristine / "run" / ownership.MARKER).read_text()))]),
         says="marker"),
    Case("l-recorded-figure-is-a-link", "links",
         lambda c: (["simulate", c.config(), "--out", str(c.copy("run"))], [_link(c, c.root / "run" / "trajectory.png", c.file("theirs.png"))]),
         says="symbolic link"),
    Case("l-previous-is-a-link", "links",
         lambda c: (["simulate", c.config(), "--out", str(c.copy("run"))], [_link(c, c.root / "run" / ".previous", c.foreign_folder("theirs"))]),
         says=".previous"),
    Case("l-export-through-a-link", "links",
         lambda c: (["sweep", "export", str(c.copy("swept")), "--format", "csv", "--out",
                     str(_link(c, c.root / "swept" / "out", c.foreign_folder("theirs")) / "results.csv")], [c.root / "theirs"]),
         says="did not write"),
    # --- the way out: --force-adopt moves, never deletes -------------------------------------------
    Case("fa-reproduce-force-adopt", "force-adopt",
         lambda c: _force_adopt(c, lambda c: ["reproduce", "model-equivalence", "--quick", "--out", str(c.root / "site"), "--force-adopt"]), code=0),
    *(Case(f"fa-refused-{how}", "force-adopt", lambda c, how=how: _adopt_refused(c, how), says=says)
      for how, says in (("parent-of-home", "home folder"), ("current-folder-parent", "current folder"), ("current-folder", "current folder"),
                        ("sticky", "sticky"), ("world-writable", "world-writable"), ("fifo", "pipe (a FIFO)"), ("socket", "s (a socket)"),
                        ("x11-unix", ".X11-unix/X0 (a socket)"), ("device", "null (a device)"),
                        ("other-user", "sub/theirs.txt (uid 4321)"), ("mount-point", "mount point"),
                        ("mount-inside", "holds mount points: disk"))),
    Case("fa-simulate-force-adopt", "force-adopt",
         lambda c: _force_adopt(c, lambda c: ["simulate", c.config(), "--out", str(c.root / "site"), "--force-adopt"]), code=0),
]  # fmt: skip


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A finished run folder and sweep folder, copied by the cases that need them."""
    root = tmp_path_factory.mktemp("pristine")
    (root / "c.toml").write_text(CONFIG)
    (root / "base.toml").write_text(CONFIG)
    (root / "sweep.toml").write_text(SWEEP)
    assert entry(["simulate", str(root / "c.toml"), "--out", str(root / "run")]) == 0
    assert entry(["sweep", str(root / "sweep.toml"), "--out", str(root / "swept"), "--workers", "0"]) == 0
    return root


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_ownership_case(case, pristine, tmp_path, monkeypatch, capsys, request):
    from attndyn.models.bert import cache_dir

    monkeypatch.setenv("ATTNDYN_CACHE", str(cache_dir()))
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("export X=1\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mplconfig"))
    # no preview: a system Chromium writes its profile under $HOME, which the cases hash as a foreign tree
    monkeypatch.setenv("ATTNDYN_CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.chdir(tmp_path)
    ctx = Ctx(tmp_path / "w", pristine, monkeypatch, request.addfinalizer)
    ctx.root.mkdir()
    argv, foreign = case.build(ctx)
    foreign = [*foreign, home]
    before = [lhash(p) for p in foreign]
    code = entry(argv)
    out, err = capsys.readouterr()
    lost = [str(p) for p, h in zip(foreign, before, strict=True) if lhash(p) != h]
    ran = (ctx.root / "ran.txt").exists()  # the planted library's mark
    if os.environ.get("ATTNDYN_OUTCOMES"):  # the tally of the note: tried / exit 2 / silent / data loss
        with open(os.environ["ATTNDYN_OUTCOMES"], "a") as fh:  # noqa: PTH123
            fh.write(json.dumps({"case": case.id, "category": case.category, "code": code, "lost": bool(lost), "foreign_code": ran}) + "\n")
    assert not lost, f"{case.id}: changed {lost}\n{err}"
    assert code == case.code, f"{case.id}: exit {code}\n{out}\n{err}"
    if case.code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, f"{case.id}: {err!r}"
        assert lines[0].startswith("error: ")
        assert case.says in lines[0], f"{case.id}: {lines[0]!r} does not say {case.says!r}"
    for check in ctx.checks:
        check()


def test_force_adopt_prints_every_entry_it_moved_and_where(tmp_path, capsys):
    site = tmp_path / "site"
    for name in ("index.html", "notes.txt", "sub/a.txt"):
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(name)
    ownership.claim(site, "run", "test", force_adopt=True)
    (adopted,) = site.glob("adopted-*")
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"adopted: moved {site / n} to {adopted / n}" for n in ("index.html", "notes.txt", "sub")]


def test_the_table_covers_every_category():
    counts: dict[str, int] = {}
    for case in CASES:
        counts[case.category] = counts.get(case.category, 0) + 1
    assert set(counts) == {
        "adopted by resemblance",
        ".previous",
        "marker believed",
        "export onto its sources",
        "kernel cache",
        "ledger",
        "links",
        "force-adopt",
        "marker signed",
    }
    assert len(CASES) >= 35


def test_a_world_writable_mode_is_what_the_kernel_case_sets():
    """The kernel cases rely on chmod taking effect (a filesystem that ignores modes would make them vacuous)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        assert stat.S_IMODE(os.stat(tmp).st_mode) & 0o002


def test_the_gate_passes_only_what_attndyn_wrote_as_it_wrote_it(tmp_path):
    """``release``: each property alone makes it refuse (sensitivity), and an untouched file passes
    whether the record is this process's or only the marker's (as in the next run)."""
    owner = ownership.claim(tmp_path / "o", "run", "test")
    path = ownership.write_bytes(tmp_path / "o" / "a.json", b"{}")
    owner.add("a.json")
    ownership.release(path)
    ownership._WRITTEN.clear()  # a later process: only the marker speaks
    ownership.release(path)
    path.write_bytes(b"{ }")
    with pytest.raises(ownership.OwnershipError, match="changed since"):
        ownership.release(path)
    path.unlink()
    (tmp_path / "elsewhere").write_bytes(b"{}")
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ownership.OwnershipError, match="symbolic link"):
        ownership.release(path)
    (tmp_path / "o" / "b.json").write_text("theirs")
    with pytest.raises(ownership.OwnershipError, match="not written by attndyn"):
        ownership.release(tmp_path / "o" / "b.json")
    with pytest.raises(ownership.OwnershipError, match="not written by attndyn"):
        owner.add("b.json")  # a file this process did not write is never recorded as attndyn's
    with pytest.raises(ownership.OwnershipError):
        ownership.write_bytes(tmp_path / "o" / "b.json", b"ours")
    assert (tmp_path / "o" / "b.json").read_text() == "theirs"


def test_previous_keeps_what_attndyn_did_not_put_there(tmp_path):
    owner = ownership.claim(tmp_path / "o", "run", "test")
    for generation in (b"1", b"2", b"3"):
        ownership.clear(owner)
        ownership.write_bytes(tmp_path / "o" / "summary.json", generation)
        owner.add("summary.json")
        if generation == b"2":
            (tmp_path / "o" / ".previous" / "mine.txt").write_text("kept")
    assert (tmp_path / "o" / ".previous" / "summary.json").read_bytes() == b"2"
    assert (tmp_path / "o" / ".previous" / "mine.txt").read_text() == "kept"
    marker = ownership.read_marker(tmp_path / "o")
    assert marker["previous"] == {"summary.json": hashlib.sha256(b"2").hexdigest()}
