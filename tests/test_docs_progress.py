"""``make docs`` says what it is doing (issue 52 item 3): docs/hooks.py prints one line per notebook with its
time, and names the page being built whenever nothing else was printed for ``HEARTBEAT`` seconds.

Oracle: a build driven through the hooks' events in MkDocs' order (pre_build, files, then per page
pre_page ... page_content, post_build) with a notebook that takes a known time."""

from __future__ import annotations

import importlib.util
import re
import time
from types import SimpleNamespace

from tests.helpers import ROOT


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(path: str):
    return SimpleNamespace(file=SimpleNamespace(src_path=path))


def test_each_notebook_gets_a_line_with_its_time_and_a_long_one_a_heartbeat(capsys):
    hooks = _hooks()
    hooks.HEARTBEAT = 0.5
    config = SimpleNamespace(plugins={"mkdocs-jupyter": SimpleNamespace(config={"execute": True})})
    files = [_page(p).file for p in ("index.md", "notebooks/01-a.ipynb", "notebooks/02-b.ipynb")]
    hooks.on_pre_build(config)
    hooks.on_files(files, config)
    for path, seconds in (("index.md", 0.0), ("notebooks/01-a.ipynb", 0.1), ("notebooks/02-b.ipynb", 3.2)):
        page = _page(path)
        hooks.on_pre_page(page, config, files)
        time.sleep(seconds)  # the notebook executing
        assert hooks.on_page_content("<p></p>", page, config, files) == "<p></p>"
    hooks.on_post_build(config)
    lines = capsys.readouterr().err.splitlines()
    done = [line for line in lines if " executed in " in line]
    assert len(done) == 2, lines
    assert re.fullmatch(r"docs: notebooks/01-a\.ipynb executed in 0 s \(1 of 2 notebooks\)", done[0]), done
    m = re.fullmatch(r"docs: notebooks/02-b\.ipynb executed in (\d+) s \(2 of 2 notebooks\)", done[1])
    assert m, done
    assert 3 <= int(m.group(1)) <= 4, done
    assert "docs: notebooks/02-b.ipynb: executing (2 of 2 notebooks)" in lines
    beats = [line for line in lines if line.startswith("docs: building notebooks/02-b.ipynb, ")]
    assert len(beats) >= 2, lines  # 3.2 s without a line, heartbeat 0.5 s, the thread looking each second
    time.sleep(1.5)
    assert capsys.readouterr().err == ""  # the heartbeat ends with the build
