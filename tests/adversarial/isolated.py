"""Run one adversarial case in a fresh Python process, so a crash or hang fails that case alone.

A case is a snippet of Python. It passes when the process exits normally (status 0) and, where
the test says so, prints what the test expects. A signal (segfault, abort) or a timeout is
reported as such, with the process's output, instead of taking the whole test run down.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        how = (f"killed by {signal.Signals(-self.returncode).name}" if self.returncode < 0
               else f"exit status {self.returncode}")
        return f"{how}\n--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"


def run(code: str, *, env: Optional[Dict[str, str]] = None, timeout: float = 120, cwd: Optional[Path] = None,
        expect_ok: bool = True) -> Outcome:
    """Run ``code`` (dedented) with ``python -c`` and return its outcome.

    ``env`` entries are added to (a value of None removes from) this process's environment, so the
    child shares the test run's compile cache. With ``expect_ok`` a non-zero exit, a signal or a
    timeout fails the calling test with the child's output.
    """
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full_env.get("PYTHONPATH", "")]))
    for k, v in (env or {}).items():
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = v
    try:
        p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(code)],
                           capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd or ROOT)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise AssertionError(f"case did not finish within {timeout} s (a hang)\n--- stdout\n{out[-4000:]}"
                             f"\n--- stderr\n{err[-4000:]}") from None
    outcome = Outcome(p.returncode, p.stdout, p.stderr)
    if expect_ok and p.returncode != 0:
        raise AssertionError("case failed: " + outcome.describe())
    return outcome
