"""A script run in a new Python process on an empty kernel cache, with numba's compiles counted:
what the artifact tests ask of a deployed model's first process (it must compile nothing)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[1]

# prepended to every script: ``Count.n`` is the number of numba compiles the script caused
COMPILE_COUNTER = r"""
import sys
from numba.core import event

class Count(event.Listener):
    n = 0
    def on_start(self, ev):
        Count.n += 1
    def on_end(self, ev):
        pass

event.register("numba:compile", Count())
"""


def run_fresh(script: str, args, cache_dir) -> List[str]:
    """Run ``COMPILE_COUNTER + script`` with ``args`` as sys.argv[1:], opdsl from this tree and
    ``cache_dir`` as its kernel cache; returns the words it printed (asserting it exited 0)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPDSL_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", COMPILE_COUNTER + script, *map(str, args)],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()
