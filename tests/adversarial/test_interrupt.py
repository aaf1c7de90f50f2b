"""Ctrl-C stops a running launch: a child runs a kernel that would take minutes, the test sends
SIGINT a second after the child says "started", and the child must end with KeyboardInterrupt
within a few seconds (backends/interrupt.py).  Every case is its own process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.adversarial.isolated import ROOT

KERNELS = '''
import sys, time
import numpy as np
import dsl
from dsl import In, InOut, Out, f32, i64

@dsl.kernel
def spin(x: In[f32], y: InOut[f32], n: i64):
    lo, hi = dsl.split(x.size)
    for r in range(n):
        for i in range(lo, hi):
            y.flat[i] = y.flat[i] * 0.5 + x.flat[i]

@dsl.kernel
def spin_while(x: In[f32], y: InOut[f32], n: i64):
    k = n
    while k > 0:
        y[dsl.thread_id()] = y[dsl.thread_id()] * 0.5 + x[0]
        k -= 1

@dsl.kernel(threads=4)
def spin_sync(x: In[f32], y: InOut[f32], n: i64):
    buf = dsl.scratch((4,), f32)
    t = dsl.thread_id()
    for r in range(n):
        buf[t] = y[t] * 0.5 + x[t]
        dsl.sync()
        y[t] = buf[(t + 1) % 4]
        dsl.sync()

KERNEL = {"spin": spin, "spin_while": spin_while, "spin_sync": spin_sync}[sys.argv[1]]
backend, entry = sys.argv[2], sys.argv[3]
x = np.ones(64, np.float32)
y = np.zeros(64, np.float32)
def entry_point(launcher):
    return {"serial": getattr(launcher, "run_serial", launcher),
            "parallel": getattr(launcher, "run_parallel", launcher), "auto": launcher}[entry]

short, short_values, short_grid = KERNEL.prepare((x, y, 1), {}, backend=backend)
entry_point(short)(short_values, short_grid)  # compile this entry first: "started" means the long launch
launcher, values, grid = KERNEL.prepare((x, y, 10 ** 12), {}, backend=backend)
run = entry_point(launcher)
print("started", flush=True)
t0 = time.monotonic()
try:
    run(values, grid)
except KeyboardInterrupt:
    print(f"KeyboardInterrupt at {time.monotonic():.6f}, after {time.monotonic() - t0:.2f} s", flush=True)
    sys.exit(0)
print("finished without an interrupt", flush=True)
sys.exit(1)
'''


def _interrupt(kernel: str, backend: str, entry: str, tmp_path) -> str:
    script = tmp_path / "child.py"
    script.write_text(KERNELS)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if backend == "opencl":
        env.setdefault("OPDSL_OPENCL_DEVICE", "Oclgrind")
    p = subprocess.Popen([sys.executable, "-X", "faulthandler", str(script), kernel, backend, entry],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 240
        line = p.stdout.readline()
        if "started" not in line:
            p.kill()
            out, err = p.communicate()
            if backend == "opencl" and "no usable" in (line + out + err).lower():
                pytest.skip("no OpenCL device")
            raise AssertionError(f"child did not start: {line}{out}\n{err}")
        assert time.monotonic() < deadline
        time.sleep(1.0)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        try:  # generous: exiting (numba's pool, the interpreter) may wait on a loaded machine
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"the launch ran on after SIGINT\n{out}\n{err}") from None
        assert p.returncode == 0, f"exit status {p.returncode}\n{out}\n{err}"
        assert "KeyboardInterrupt at " in out, out
        # the launch's own stop, on the clock both processes share (CLOCK_MONOTONIC), not the exit
        took = float(out.split("KeyboardInterrupt at ")[1].split(",")[0]) - sent
        assert took < 3, f"took {took:.2f} s to stop"
        return out
    finally:
        if p.poll() is None:
            p.kill()


@pytest.mark.parametrize("entry", ["serial", "parallel"])
@pytest.mark.parametrize("kernel", ["spin", "spin_while", "spin_sync"])
def test_numba_launch_stops_on_sigint(kernel, entry, tmp_path):
    _interrupt(kernel, "numba", entry, tmp_path)


@pytest.mark.parametrize("kernel", ["spin", "spin_sync"])
def test_opencl_launch_stops_on_sigint(kernel, tmp_path):
    _interrupt(kernel, "opencl", "auto", tmp_path)


def test_interpreter_launch_stops_on_sigint(tmp_path):
    _interrupt("spin_sync", "interpreter", "auto", tmp_path)


def test_user_handler_still_runs_and_later_launches_work(tmp_path):
    """A user's own SIGINT handler is chained, not replaced, and a handled interrupt does not
    leak into the next launch."""
    script = tmp_path / "child.py"
    script.write_text(KERNELS.split("KERNEL = ")[0] + textwrap.dedent('''
        import signal
        seen = []
        def handler(sig, frame):
            seen.append(sig)
            raise KeyboardInterrupt
        signal.signal(signal.SIGINT, handler)
        x = np.ones(64, np.float32); y = np.zeros(64, np.float32)
        spin(x, y, 1)
        print("started", flush=True)
        try:
            spin(x, y, 10 ** 12)
        except KeyboardInterrupt:
            pass
        y[:] = 0
        spin(x, y, 3)                       # runs to the end: the earlier SIGINT is not pending
        assert np.allclose(y, 1.75), y[:4]
        print("handler calls:", len(seen), flush=True)
    '''))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=tmp_path)
    try:
        assert "started" in p.stdout.readline()
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "handler calls: 1" in out


AGAIN = KERNELS.split("KERNEL = ")[0] + '''
import os, signal, threading
import backends.interrupt as ctrl_c
backend = sys.argv[1]
x = np.ones(64, np.float32)
spin(x, np.zeros(64, np.float32), 1, backend=backend)  # compiled (and the OpenCL device made) first
armed = threading.Event()
_arm = ctrl_c.arm
def signalling_arm():
    start = _arm()
    armed.set()
    return start
ctrl_c.arm = signalling_arm
def ctrl_c_once_armed():
    armed.wait(120)
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGINT)
for k in range(3):
    armed.clear()
    threading.Thread(target=ctrl_c_once_armed, daemon=True).start()
    try:
        spin(x, np.zeros(64, np.float32), 10 ** 12, backend=backend)
        print(k, "ran to the end", flush=True)
    except KeyboardInterrupt:
        print(k, "stopped", flush=True)
'''


@pytest.mark.parametrize("backend", ["numba", "opencl"])
def test_every_ctrl_c_stops_a_launch_not_only_the_first(backend, tmp_path):
    """PoCL's SIGINT handler (LLVM's crash-file cleanup) removes itself when it runs and puts back
    the handler it found, Python's: opdsl's, in front of it, went with it, and the second Ctrl-C
    of a process no longer stopped an OpenCL launch (or a numba one, once PoCL was loaded)."""
    script = tmp_path / "again.py"
    script.write_text(AGAIN)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        p = subprocess.run([sys.executable, str(script), backend], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=60)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"a launch ran on after a later Ctrl-C\n{e.stdout}") from None
    if backend == "opencl" and "no usable" in (p.stdout + p.stderr).lower():
        pytest.skip("no OpenCL device")
    assert p.stdout.split() == ["0", "stopped", "1", "stopped", "2", "stopped"], p.stdout + p.stderr


THREADS = KERNELS.split("KERNEL = ")[0] + '''
import threading
backend, n_threads = sys.argv[1], int(sys.argv[2])
x = np.ones(64, np.float32)
warm = [threading.Thread(target=spin, args=(x, np.zeros(64, np.float32), 1), kwargs={"backend": backend})
        for _ in range(n_threads)]  # compiled, every entry, and the device created in workers:
for t in warm: t.start()            # the main thread never launches
for t in warm: t.join()
import backends.interrupt as ctrl_c
armed = []                          # "started" once every launch has read the counter: on a loaded machine
_arm = ctrl_c.arm                   # a thread may reach its launch seconds after it was started
def counting_arm():
    start = _arm()
    armed.append(start)
    return start
ctrl_c.arm = counting_arm
stopped, finished, errors = [], [], []
def work(k):
    try:
        spin(x, np.zeros(64, np.float32), 10 ** 12, backend=backend)
        finished.append(k)            # ran to the end: the interrupt did not stop it
    except KeyboardInterrupt:
        stopped.append(time.monotonic())
    except BaseException as e:        # anything else is a failure to report, not a stop
        errors.append(repr(e))
def ended():
    return len(stopped) + len(finished) + len(errors)
threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(n_threads)]
for t in threads: t.start()
deadline = time.monotonic() + 120
while len(armed) < n_threads and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(0.2)
print("started", flush=True)
# The main thread waits by polling, never in Thread.join: a KeyboardInterrupt raised inside join()
# marks the thread it was waiting for as finished while it still runs (CPython gh-90882, 3.11), so
# the joins after it returned at once and a launch still on its way to the stop was counted as
# running on ("stopped 2 of 3", the third stopping milliseconds later).
try:
    while ended() < n_threads:
        time.sleep(0.01)
except KeyboardInterrupt:
    sent = time.monotonic()
    deadline = sent + 20              # a loaded machine may take seconds to schedule each stop
    while ended() < n_threads and time.monotonic() < deadline:
        time.sleep(0.01)
    last = max(stopped, default=sent) - sent
    print(f"stopped {len(stopped)} of {n_threads}; the last {last:.3f} s after the main thread's interrupt; "
          f"finished {len(finished)}, errors {errors}", flush=True)
    if len(stopped) != n_threads:     # where the launch that ran on is, for the failure message
        import faulthandler
        faulthandler.dump_traceback(sys.stdout, all_threads=True)
    sys.exit(0 if len(stopped) == n_threads else 1)
print(f"no interrupt reached the main thread; finished {len(finished)}, errors {errors}", flush=True)
sys.exit(1)
'''


@pytest.mark.parametrize("backend", ["numba", "opencl"])
def test_sigint_stops_launches_in_every_thread(backend, tmp_path):
    """Three worker threads each run a long launch while the main thread only waits for them: one
    Ctrl-C stops all three. On OpenCL the launches queue on the device lock, so the ones still
    waiting must stop too, and the handler must be installed from a worker thread (and again after
    PoCL replaced it when its device was created). numba's launches run side by side."""
    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-X", "faulthandler", str(script), backend, "3"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        line = p.stdout.readline()
        if "started" not in line:
            p.kill()
            out, err = p.communicate()
            if backend == "opencl" and "no usable" in (line + out + err).lower():
                pytest.skip("no OpenCL device")
            raise AssertionError(f"child did not start: {line}{out}\n{err}")
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"launches ran on after SIGINT\n{out}\n{err}") from None
        assert p.returncode == 0, f"exit status {p.returncode}\n{out}\n{err}"
        assert "stopped 3 of 3" in out, out
    finally:
        if p.poll() is None:
            p.kill()
