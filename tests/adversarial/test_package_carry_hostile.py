"""A package op unpickled where its package folder is absent (a Dask worker) must never run code
another local user prepared: not from the predictable folder the files used to be written to,
and not from a ``__pycache__/*.pyc`` the package did not carry.  Each step in its own process."""
import importlib.util
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.adversarial.isolated import ROOT, run

PACKAGE = ROOT / "examples" / "qaic_package"

PICKLE = '''
import pickle, dsl
from dsl.package.carry import carried_class
pkg = dsl.register_package({package!r})
(cls,) = [c for c in pkg.ops if c.op_type == "CustomRelu"]
with open({out!r}, "wb") as f:
    pickle.dump(cls(alpha=0.5, beta=0.2), f)
print("digest", carried_class(cls).digest)
'''

UNPICKLE = '''
import pickle, numpy as np
op = pickle.load(open({out!r}, "rb"))
x = np.linspace(-4, 4, 16).astype(np.float32)
y = op(x, backend="interpreter")
print("ok" if np.allclose(y, np.clip(0.5 * x + 0.2, 0, 1)) else "WRONG")
'''


def _plant_bytecode(folder: Path, sentinel: Path) -> int:
    """A valid ``__pycache__`` entry for every ``.py`` in ``folder``: the real module plus a line
    that creates ``sentinel``, stamped with the source's mtime and size so Python would use it."""
    planted = 0
    for source in folder.glob("*.py"):
        text = source.read_text() + f"\nopen({str(sentinel)!r}, 'w').close()\n"
        code = compile(text, str(source), "exec")
        st = source.stat()
        pyc = importlib.util.cache_from_source(str(source))
        os.makedirs(os.path.dirname(pyc), exist_ok=True)
        from importlib._bootstrap_external import _code_to_timestamp_pyc
        Path(pyc).write_bytes(_code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))
        planted += 1
    return planted


def test_an_unpickled_package_never_runs_code_another_user_planted(tmp_path):
    package, shared_tmp = tmp_path / "qaic_package", tmp_path / "shared-tmp"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    shared_tmp.mkdir()
    os.chmod(shared_tmp, 0o1777)  # like /tmp
    env = {"TMPDIR": str(shared_tmp)}
    out = tmp_path / "op.pkl"
    digest = run(PICKLE.format(package=str(package), out=str(out)), env=env).stdout.split("digest ")[1].split()[0]
    shutil.rmtree(package)  # the receiving process has no copy: the pickle carries the files

    # another local user prepares the folder the files used to be unpacked to: the same files
    # (so nothing is rewritten) and bytecode that runs their code
    sentinel = tmp_path / "attacker-code-ran"
    trap = shared_tmp / "opdsl-packages" / f"qaic_example-{digest}"
    shutil.copytree(PACKAGE, trap, ignore=shutil.ignore_patterns("__pycache__"))
    past = time.time() - 3600
    for f in trap.iterdir():
        os.utime(f, (past, past))
    assert _plant_bytecode(trap, sentinel) >= 2

    result = run(UNPICKLE.format(out=str(out)), env=env)
    assert result.stdout.split() == ["ok"], result.describe()
    assert not sentinel.exists(), "code planted in the shared temp folder ran in the unpickling process"
    assert not [p for p in shared_tmp.iterdir() if p.name.startswith("opdsl-package-")], \
        "the private unpack folder outlived the process"

    # control: the planted bytecode is what a plain import of that folder runs
    run(f"import sys; sys.path.insert(0, {str(trap)!r}); import functions")
    assert sentinel.exists(), "the planted bytecode is never used: this test proves nothing"


def test_a_registered_package_never_reads_its_pycache(tmp_path):
    package = tmp_path / "qaic_package"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    sentinel = tmp_path / "stale-bytecode-ran"
    assert _plant_bytecode(package, sentinel) >= 2
    before = {p.name: p.read_bytes() for p in (package / "__pycache__").iterdir()}
    run(f"import dsl; dsl.register_package({str(package)!r})")
    assert not sentinel.exists()
    assert {p.name: p.read_bytes() for p in (package / "__pycache__").iterdir()} == before, \
        "registering wrote bytecode of its own"
