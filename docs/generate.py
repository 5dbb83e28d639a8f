"""Write the pages of the docs site that are generated from the code (run by `make docs`).

* ``docs/claims.md``: the catalogue of claims (statement, reference, hypotheses, kind, quick
  sizes), read from :mod:`attndyn.claims` (nothing is run);
* ``docs/notebooks/*.ipynb``: copies of ``examples/*.ipynb`` (mkdocs-jupyter renders and executes them).
"""

from __future__ import annotations

import inspect
import re
import shutil
from pathlib import Path

from attndyn.claims import EXPERIMENTS, load

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent


def catalogue() -> str:
    lines = [
        "# Claims catalogue",
        "",
        "Every claim `attndyn reproduce` checks, in the order of the report. *pass/fail* claims have judged",
        "checks (see [how a verdict is judged](guide/claims.md)); *report* claims show values and figures.",
        "",
        "| claim | kind | reference |",
        "|---|---|---|",
    ]
    for cid in EXPERIMENTS:
        info = load(cid).CLAIM
        lines.append(f"| [`{cid}`](#{cid}) | {info.kind} | {info.paper_ref} |")
    lines.append("")
    for cid in EXPERIMENTS:
        module = load(cid)
        info = module.CLAIM
        lines += [f"## {cid}", "", f"**{info.title}**", "", f"*{info.kind}* · {info.paper_ref}", "", info.statement, ""]
        lines += [f"*Hypotheses.* {info.hypotheses}", ""]
        stated = re.findall(r'detects="([^"]+)"', inspect.getsource(module))
        for k, v in vars(module).items():
            if "DETECTS" in k:
                stated += [v] if isinstance(v, str) else [x for x in getattr(v, "values", list)() if isinstance(x, str)]
        powers = sorted(set(stated))
        if powers:
            lines += ["*What its judged checks are shown to detect:* " + "; ".join(powers) + ".", ""]
        elif info.kind == "pass/fail":
            lines += ["*What its judged checks detect* is not yet stated (each has a violating-input test).", ""]
        quick = getattr(module, "QUICK", {})
        if quick:
            lines += ["*Quick size* (`--quick`): " + ", ".join(f"`{k} = {v}`" for k, v in quick.items()) + ".", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    (DOCS / "claims.md").write_text(catalogue())
    out = DOCS / "notebooks"
    out.mkdir(exist_ok=True)
    for nb in sorted((ROOT / "examples").glob("*.ipynb")):
        shutil.copyfile(nb, out / nb.name)


if __name__ == "__main__":
    main()
