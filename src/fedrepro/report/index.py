"""results/index.md: every table and figure of the enabled papers, with links."""

from __future__ import annotations

import os
from pathlib import Path

from fedrepro.report.tables import SCALE_NOTE


def write_index(job) -> None:
    index = Path(job.output["index"])
    lines = ["# fedrepro results", "", SCALE_NOTE.get(job.spec["scale"], job.spec["scale"]), ""]
    for paper in job.spec["papers"]:
        lines += [f"## {paper}", ""]
        for target in job.input["targets"]:
            path = Path(target)
            if f"/{paper}/" not in f"/{path.as_posix()}" or path.suffix not in (".md", ".png"):
                continue
            link = os.path.relpath(path, index.parent)
            lines.append(f"- ![{path.stem}]({link})" if path.suffix == ".png" else f"- [{path.stem}]({link})")
        lines.append("")
    index.write_text("\n".join(lines))
