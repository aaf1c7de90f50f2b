"""The fresh process ``Model.save`` runs (artifact_save.py): load the draft artifact, run it once
while the compile cache records what is read and written, report those entries, the toolchain and
the CPU.  ``python -m dsl.opgraph.artifact_probe DRAFT FACTS.json run|facts-only [FEEDS.npz]``"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from backends import cache
from dsl.opgraph import artifact_format, artifact_load, plan_cache
from dsl.opgraph.artifact_save import CODE_FOLDERS


def default_feeds(model) -> dict:
    """Zeros of every input's shape (unknown dims 1): what the one compiling run is given."""
    return {name: np.zeros(tuple(1 if d is None else d for d in spec.shape), spec.dtype.np)
            for name, spec in model.inputs.items()}


def main(argv) -> int:
    draft, out = argv[0], Path(argv[1])
    art = artifact_format.read(draft, trusted=True)  # our own private temporary file
    backend = art.header["backend"]
    artifact_load.register_packages(art.header.get("packages"))
    with cache.recording() as seen:
        model = artifact_load.open_state(art)
        if backend != "interpreter" and argv[2] == "run":
            feeds = default_feeds(model)
            if len(argv) > 3:
                with np.load(argv[3]) as given:
                    feeds.update({k: given[k] for k in given.files})
            model.run(feeds)
    root = cache.cache_root()
    found = set()
    for p in seen:
        p = Path(p)
        if p.parent.parent == root and p.parent.name in CODE_FOLDERS and p.is_file():
            found.add((p.parent.name, p.name))
    facts = {"files": sorted(found), "toolchain": plan_cache.toolchain_key(),
             "target": artifact_load.target_facts(backend)}
    out.write_text(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
