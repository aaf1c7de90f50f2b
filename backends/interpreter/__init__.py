"""The interpreter backend: the executable specification of the kernel language.

It runs the user's own Python function, once per team thread, on real Python
threads with a real barrier, so ``print``, ``pdb`` and ``breakpoint()`` work on
the user's lines.  Only the surroundings are changed so that plain Python
behaves as the compiled backends do:

* the function is rebuilt around the *same code object* with globals whose
  builtins ``min max abs`` promote like the compiled ones, and ``@dsl.func``
  helpers get the argument and return types the checker gave them;
* team queries (``dsl.thread_id()``...) are i64, as the checker types them;
* tensors are thin views that check every index (numpy would silently wrap a
  negative one), refuse writes to ``In`` tensors, widen f16/bf16 loads to f32
  and wrap stores to narrow ints like ``astype`` (views.py; ``dsl.local`` arrays
  are such views too, one per thread);
* SIMD values are numpy arrays of their lanes (``dsl.lang.builtins.Lanes``), on
  which augmented assignment makes a new value instead of writing in place;
* ``dsl.sync()`` is a barrier that notices a deadlock (a thread that left the
  kernel, or threads waiting at different ``sync()`` calls) and reports it as a
  ``dsl.LaunchError`` instead of hanging.

Tiles run one after the other; each worker thread ``t`` plays thread ``t`` of
every tile in order, so a launch costs ``threads`` thread starts whatever the grid
(a one-thread team runs on the caller's thread).
"""
from __future__ import annotations

import builtins as _py_builtins
import dis
import inspect
import os
import sys
import threading
import types
from typing import Dict, List, Optional, Sequence

import numpy as np

from dsl.lang import builtins as B
from dsl.lang import ir
from dsl.lang.grid import Grid, shape as grid_shape, size as grid_size
from dsl.lang import types as T
from dsl.lang.errors import KernelValueError, LaunchError, SourceLoc
from dsl.lang.func import Func
from dsl.lang.visitor import Visitor
from backends.base import Backend, CompileRequest, Launcher, TargetInfo
from backends import bounds, host, log_gate
from backends.interpreter.views import Tensor, local_array

# --------------------------------------------------------------------------- Python builtins

# ``min max abs`` promote like the compiled builtins (NEP 50, one result type).
# ``int() float() bool()`` stay Python's: the checker types them as *weak*
# casts (a Python int/float/bool that takes the other operand's type), which is
# exactly what the Python builtins return; ``range`` yields weak ints, and
# ``.shape``/``.size`` are weak ints too.
_PRINT_LOCK = threading.Lock()


def _kernel_print(*args, sep=" ", end="\n", file=None, flush=False):
    """print() that writes each call as one piece, so team threads never interleave words."""
    out = file if file is not None else sys.stdout
    text = sep.join(map(str, args)) + end
    with _PRINT_LOCK:
        out.write(text)
        if flush:
            out.flush()


def _kernel_range(*args):
    """range(), with a step of 0 refused as on the compiled backends (located by _wrap_exception)."""
    if len(args) == 3 and args[2] == 0:
        err = KernelValueError("range(): step is 0; accepted: a step other than 0")
        err.what, err.value, err.loc = "range_step", 0, None
        raise err
    return range(*args)


_KERNEL_BUILTINS = dict(vars(_py_builtins))
# Python's min/max/abs and ** in a kernel are the registered builtins (dsl/lang/builtins.py)
_KERNEL_BUILTINS.update({name: B.BUILTINS[name].runtime for name in ("min", "max", "abs")})
_KERNEL_BUILTINS.update(int=B.int_, float=B.float_, bool=B.bool_, print=_kernel_print, range=_kernel_range,
                        __opdsl_pow__=B.BUILTINS["pow"].runtime)

# Frames in these files are ours, not the user's: skipped when naming call sites
# and trimmed from tracebacks shown to the user.
_HERE = os.path.dirname(os.path.abspath(__file__))
_OWN_FILES = {os.path.join(_HERE, f) for f in os.listdir(_HERE) if f.endswith(".py")} | {os.path.abspath(B.__file__)}


def _own(code) -> bool:
    return os.path.abspath(code.co_filename) in _OWN_FILES


# --------------------------------------------------------------------------- the team

class _Abort(BaseException):
    """Unwinds a thread whose launch already failed elsewhere (never reaches the user)."""


def _user_frame():
    """The innermost frame of user code calling into us (skips dsl.builtins and this file)."""
    f = sys._getframe(2)
    while f is not None and _own(f.f_code):
        f = f.f_back
    return f


def _where(frame) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "<unknown>"


class _Team:
    """One team (tile): its barrier, its scratch buffers and who has left."""

    def __init__(self, launch: "_Launch", tile: int):
        self.launch = launch
        self.tile = tile
        self.cond = launch.cond
        self.waiting: Dict[int, tuple] = {}  # thread -> (call site, "file:line")
        self.left: Dict[int, str] = {}       # thread -> how it left
        self.generation = 0
        self.scratch: Dict[tuple, Tensor] = {}

    def sync(self, tid: int) -> None:
        frame = _user_frame()
        site = (frame.f_code, frame.f_lasti) if frame is not None else None
        with self.cond:
            self.launch.check_abort()
            self.waiting[tid] = (site, _where(frame))
            gen = self.generation
            self._settle()
            while gen == self.generation and not self.launch.failed:
                self.cond.wait()
            if gen == self.generation:
                raise _Abort()

    def leave(self, tid: int, how: str) -> None:
        with self.cond:
            self.left[tid] = how
            self.waiting.pop(tid, None)
            self._settle()
            if len(self.left) == self.launch.threads:
                self.scratch.clear()

    def _settle(self) -> None:
        """Release the barrier, or report a deadlock, once every live thread waits."""
        if not self.waiting or len(self.waiting) + len(self.left) < self.launch.threads:
            return
        sites = {site for site, _ in self.waiting.values()}
        if len(sites) == 1 and not self.left:
            self.waiting.clear()
            self.generation += 1
            self.cond.notify_all()
            return
        self.launch.fail_deadlock(self._deadlock_message())

    def _deadlock_message(self) -> str:
        launch = self.launch
        head = f"deadlock in kernel {launch.name!r}" + (f", tile {self.tile}" if launch.grid > 1 else "")
        by_line: Dict[str, List[int]] = {}
        for tid, (_, where) in sorted(self.waiting.items()):
            by_line.setdefault(where, []).append(tid)
        waits = "; ".join(f"{_threads(tids)} {'waits' if len(tids) == 1 else 'wait'} at dsl.sync() at {where}"
                          for where, tids in by_line.items())
        if self.left:
            lefts = "; ".join(f"thread {tid} {how}" for tid, how in sorted(self.left.items()))
            return (f"{head}: {lefts}, while {waits}.\n"
                    "Every thread of a team must reach each dsl.sync(); do not return early before a sync().")
        return (f"{head}: threads wait at different dsl.sync() calls: {waits}.\n"
                "Every thread of a team must reach the same dsl.sync() calls in the same order.")

    def get_scratch(self, shape, dtype: T.DType) -> Tensor:
        frame = _user_frame()
        key = (frame.f_code, frame.f_lasti) if frame is not None else None
        with self.cond:
            buf = self.scratch.get(key)
            if buf is None:
                decl = self.launch.scratch_decl(frame)
                if decl is not None:  # the checked declaration: TypeVars and dsl.const sizes resolved
                    name, shape, dtype = decl.name, decl.shape, decl.dtype
                else:
                    name = f"scratch@line{frame.f_lineno if frame is not None else 0}"
                buf = Tensor(_poisoned(shape, dtype), name, "inout", dtype)
                self.scratch[key] = buf
            return buf


def _threads(tids: Sequence[int]) -> str:
    return f"thread {tids[0]}" if len(tids) == 1 else "threads " + ", ".join(map(str, tids))


def _poisoned(shape, dtype: T.DType) -> np.ndarray:
    """A fresh scratch buffer: NaN / a byte pattern, so reading before writing shows up."""
    shape = tuple(_py_builtins.int(n) for n in shape)
    if dtype.is_float:
        return np.full(shape, np.nan, dtype.np)
    if dtype.is_bool:
        return np.ones(shape, dtype.np)
    return np.frombuffer(b"\xa5" * (np.dtype(dtype.np).itemsize * _py_builtins.int(np.prod(shape))),
                         dtype.np).reshape(shape).copy()


class _Context(B.TeamContext):
    """What ``dsl.thread_id()``, ``dsl.sync()``... see in one interpreter thread."""

    def __init__(self, team: _Team, tid: int):
        launch = team.launch
        self.team = team
        # i64, not Python ints: the checker types the team builtins as strong i64
        self.thread_id = np.int64(tid)
        self.num_threads = np.int64(launch.threads)
        self.flat_tile_id = np.int64(team.tile)
        self.flat_num_tiles = np.int64(launch.grid)
        self.grid_shape = launch.grid_shape
        self.log_level = launch.log_level

    def sync(self) -> None:
        self.team.sync(self.thread_id)

    def scratch(self, shape, dtype) -> Tensor:
        return self.team.get_scratch(shape, dtype)

    def local(self, shape, dtype) -> Tensor:
        """A fresh zeroed ``dsl.local`` array of this thread (each run of the statement re-zeroes it)."""
        name, dtype = self.team.launch.local_decl(_user_frame(), dtype)
        return local_array(name, shape, dtype)

    def log(self, level: str, text: str) -> None:
        launch = self.team.launch
        with launch.print_lock:
            print(f"[{launch.name} t={self.thread_id} tile={self.flat_tile_id}] {text}", flush=True)

    def atomic_add(self, array, index, value):
        """t[index] += value under the launch's lock; the element before, as compiled atomics return it.
        The value converts to the tensor's dtype first and integers wrap, as on the compiled targets."""
        with self.team.launch.atomic_lock:
            old = array[index]
            array[index] = np.add(old, np.asarray(value).astype(old.dtype)[()])
        return old


# --------------------------------------------------------------------------- one launch

class _Launch:
    """State shared by the worker threads of one launch."""

    def __init__(self, launcher: "InterpreterLauncher", grid: Grid):
        k = launcher.kernel
        self.name = k.name
        self.kernel = k
        self.threads = k.threads
        self.grid = grid_size(grid)  # tiles run in flat order, axis 0 fastest
        self.grid_shape = grid_shape(grid)
        # the lowest dsl.log level printing now: the compile-time floor or the run-time threshold
        gate = launcher.gate
        self.log_level = launcher.log_level if gate is None else log_gate.effective(launcher.log_level, gate)
        self.cond = threading.Condition()
        self.print_lock = launcher.print_lock
        self.atomic_lock = threading.Lock()
        self.failed = False
        self.error: Optional[BaseException] = None
        self.teams: Dict[int, _Team] = {}
        self.local_decls = launcher.local_decls

    def team(self, tile: int) -> _Team:
        with self.cond:
            team = self.teams.get(tile)
            if team is None:
                team = self.teams[tile] = _Team(self, tile)
            return team

    def retire(self, tile: int) -> None:
        with self.cond:
            team = self.teams.get(tile)
            if team is not None and len(team.left) == self.threads:
                del self.teams[tile]

    def check_abort(self) -> None:
        if self.failed:
            raise _Abort()

    def _fail(self, error: BaseException) -> None:
        with self.cond:
            if not self.failed:
                self.failed = True
                self.error = error
            self.cond.notify_all()

    def fail_deadlock(self, message: str) -> None:
        self._fail(LaunchError(message))

    def fail_exception(self, exc: BaseException, tid: int, tile: int) -> None:
        exc.__traceback__ = _trim(exc.__traceback__)
        self._fail(_wrap_exception(self, exc, tid, tile))

    def local_decl(self, frame, dtype):
        """(name, element type) of the ``dsl.local(...)`` array whose call ``frame`` is executing.

        The frontend allows only ``name = dsl.local(...)``, so the call's result goes to the next
        store instruction's name; the checker's type for that array (a dsl.const or TypeVar
        resolved, f16/bf16 as f32) is that of its element locals or of ``Kernel.arrays``."""
        key = (frame.f_code, frame.f_lasti) if frame is not None else None
        hit = self.local_decls.get(key)
        if hit is None:
            name = _assigned_name(frame) if frame is not None else None
            checked = {a.name: a.dtype for a in self.kernel.arrays}.get(name) or \
                dict(self.kernel.locals).get(f"{name}__0")
            hit = self.local_decls[key] = (name or "local", checked)
        name, checked = hit
        return name, checked if checked is not None else dtype

    def scratch_decl(self, frame) -> Optional[ir.Scratch]:
        """The kernel's ``ir.Scratch`` whose ``dsl.scratch(...)`` call ``frame`` is executing: the
        frontend gave each declaration the line and column of its call (``Kernel.scratch_at``),
        and the call instruction's position says which one this is."""
        if frame is None:
            return None
        try:
            line, _, col, _ = list(frame.f_code.co_positions())[frame.f_lasti // 2]
        except (IndexError, ValueError):
            return None
        if line is None or col is None:
            return None
        return self.kernel.scratch_at(line, col + 1)


def _assigned_name(frame) -> Optional[str]:
    """The name the call ``frame`` is executing assigns its result to (``a = dsl.local(...)``)."""
    for ins in dis.get_instructions(frame.f_code):
        if ins.offset > frame.f_lasti and ins.opname in ("STORE_FAST", "STORE_NAME", "STORE_DEREF",
                                                         "STORE_GLOBAL"):
            return ins.argval
    return None


def _trim(tb):
    """Drop our own frames from a traceback so it reads as the user's code."""
    frames = []
    while tb is not None:
        if not _own(tb.tb_frame.f_code):
            frames.append(tb)
        tb = tb.tb_next
    for a, b in zip(frames, frames[1:]):
        a.tb_next = b
    if frames:
        frames[-1].tb_next = None
        return frames[0]
    return None


def _wrap_exception(launch: _Launch, exc: BaseException, tid: int, tile: int) -> LaunchError:
    """A LaunchError naming the thread, the tile and the user's line, caused by ``exc``."""
    last = None
    tb = exc.__traceback__
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if isinstance(exc, KernelValueError) and getattr(exc, "loc", 0) is None and last is not None:
        return _refused(launch, exc, last.tb_frame, last.tb_lineno, tid, tile)
    where = ""
    if last is not None:
        import linecache
        f, line = last.tb_frame.f_code.co_filename, last.tb_lineno
        text = linecache.getline(f, line).strip()
        where = f" at {f}:{line}" + (f"\n    {text}" if text else "")
    team = f"thread {tid}" + (f" of tile {tile}" if launch.grid > 1 else "")
    err = LaunchError(f"kernel {launch.name!r} failed in {team}{where}\n{type(exc).__name__}: {exc}")
    err.__cause__ = exc
    err.thread_id = tid
    err.tile_id = tile
    return err


def _refused(launch: _Launch, exc: KernelValueError, frame, line: int, tid: int, tile: int) -> KernelValueError:
    """A refused range step or dsl.split align, worded and located as the compiled backends do
    (backends/bounds.py): the loop or call is found in the IR by the user's file and line."""
    file = frame.f_code.co_filename
    kind = ir.For if exc.what == "range_step" else ir.Require
    places = [("", launch.kernel.body)] + [(f.origin.qualname if f.origin is not None else f.name, f.body)
                                           for f in launch.kernel.funcs]  # named as backends/func_view.py does
    site = None
    for func, body in places:
        for n in ir.walk(list(body)):
            if isinstance(n, kind) and n.loc is not None and n.loc.file == file and n.loc.line == line:
                site = bounds.Site("", exc.what, False, 1, n.loc, func)
                break
        if site is not None:
            break
    if site is None:
        site = bounds.Site("", exc.what, False, 1, SourceLoc(file, line), "")
    record = bounds.new_record()
    record[bounds.INDEX], record[bounds.TID], record[bounds.TILE] = exc.value, tid, tile
    err = bounds.value_error(record, site, launch.kernel)
    err.__cause__ = None
    return err


# --------------------------------------------------------------------------- launcher and backend

class InterpreterLauncher(Launcher):
    def __init__(self, request: CompileRequest):
        self.kernel = self.kernel_ir = request.kernel
        self.pyfunc = request.pyfunc
        self.log_level = request.log_level
        # kernels with dsl.log calls: where each launch reads the run-time threshold (backends/log_gate.py)
        self.gate = log_gate.gate_of(request) if log_gate.uses_gate(request.kernel) else None
        self.print_lock = threading.Lock()
        self._params = tuple(request.kernel.params)
        self.local_decls: Dict[tuple, tuple] = {}  # dsl.local call site -> (name, checked type)

    def _bind(self, args: Sequence) -> dict:
        """Keyword arguments for the user's function: tensor views and numpy scalars."""
        if len(args) != len(self._params):
            raise TypeError(f"kernel {self.kernel.name!r} takes {len(self._params)} arguments "
                            f"({', '.join(p.name for p in self._params)}), got {len(args)}")
        out = {}
        for p, a in zip(self._params, args):
            if isinstance(p, ir.TensorParam):
                if p.access == "zeroed":  # Zeroed[...]: every launch starts from zeros
                    a.fill(0)
                out[p.name] = Tensor(a, p.name, p.access, p.dtype)
            elif isinstance(p, ir.VecParam):
                out[p.name] = Tensor(np.asarray(a, p.dtype.np).reshape(-1), p.name, "in", p.dtype)
            else:
                v = p.dtype.np.type(a if p.const_value is None else p.const_value)
                out[p.name] = np.float32(v) if p.dtype.is_storage_only else v
        return out

    def function(self):
        """The user's function over the same code object, with kernel builtins in its globals."""
        return _Rebuilder(self.kernel).function(self.pyfunc)

    def __call__(self, args: Sequence, grid: Grid = 1) -> None:
        grid = tuple(map(_py_builtins.int, grid)) if isinstance(grid, tuple) else _py_builtins.int(grid)
        if min(grid_shape(grid)) < 1:
            raise ValueError(f"grid must be >= 1 along every axis, got {grid}")
        kwargs = self._bind(args)
        fn = self.function()
        launch = _Launch(self, grid)
        if launch.threads == 1:  # the caller's own thread: pdb and Ctrl-C behave as in plain Python
            _work(launch, fn, kwargs, 0)
            if launch.error is not None:
                raise launch.error
            return
        workers = [threading.Thread(target=_work, args=(launch, fn, kwargs, tid),
                                    name=f"opdsl-{launch.name}-t{tid}", daemon=True)
                   for tid in range(launch.threads)]
        for w in workers:
            w.start()
        try:
            for w in workers:
                w.join()
        except BaseException:  # Ctrl-C while waiting: stop the team, let it unwind
            launch.fail_deadlock("launch interrupted")
            raise
        if launch.error is not None:
            raise launch.error


def _work(launch: _Launch, fn, kwargs: dict, tid: int) -> None:
    """Thread ``tid`` of every tile, in order."""
    try:
        for tile in range(launch.grid):
            if launch.failed:
                return
            team = launch.team(tile)
            B.bind_context(_Context(team, tid))
            how = "returned from the kernel"
            try:
                with np.errstate(all="ignore"):  # compiled backends give inf/nan/wrapped ints silently
                    fn(**kwargs)
            except _Abort:
                how = "stopped"
                return
            except KeyboardInterrupt:  # only the caller's thread sees signals: stop, do not wrap
                how = "interrupted"
                launch.fail_deadlock("launch interrupted")
                raise
            except BaseException as exc:  # noqa: BLE001 - reported to the caller
                how = f"raised {type(exc).__name__}"
                launch.fail_exception(exc, tid, tile)
                return
            finally:
                team.leave(tid, how)
                launch.retire(tile)
    finally:
        B.bind_context(None)


class _Rebuilder:
    """Rebuilds a kernel function and the ``@dsl.func`` helpers it reaches.

    Each module's globals are copied once (so helpers calling each other share
    them) with ``__builtins__`` replaced by the kernel builtins; code objects
    stay the same, so tracebacks, pdb and coverage see the user's lines.
    """

    def __init__(self, kernel: ir.Kernel):
        self.kernel = kernel
        self.globals: Dict[int, dict] = {}
        self.funcs: Dict[int, types.FunctionType] = {}
        self.helpers: Dict[int, object] = {}

    def function(self, fn):
        new = self.funcs.get(id(fn))
        if new is not None:
            return new
        closure = fn.__closure__
        if closure:
            closure = tuple(self._cell(c) for c in closure)
        glob = self._globals(fn.__globals__)
        new = _with_defined_pow(fn, glob, closure) or types.FunctionType(fn.__code__, glob, fn.__name__,
                                                                         fn.__defaults__, closure)
        new.__kwdefaults__ = fn.__kwdefaults__
        new.__dict__.update(getattr(fn, "__dict__", {}))
        self.funcs[id(fn)] = new
        return new

    def _globals(self, module_globals: dict) -> dict:
        glob = self.globals.get(id(module_globals))
        if glob is None:
            glob = self.globals[id(module_globals)] = {}
            glob.update(module_globals)
            glob["__builtins__"] = _KERNEL_BUILTINS
            for k, v in module_globals.items():
                if isinstance(v, Func):
                    glob[k] = self._adapt(v)
        return glob

    def _adapt(self, value):
        py = getattr(value, "fn", None)
        if not isinstance(py, types.FunctionType):
            return value
        helper = self.helpers.get(id(py))
        if helper is None:
            specs = _specializations(self.kernel, py)
            rebuilt = self.function(py)
            helper = self.helpers[id(py)] = _typed_helper(rebuilt, specs) if specs else rebuilt
        return helper

    def _cell(self, cell):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            return cell
        if isinstance(value, Func):
            return types.CellType(self._adapt(value))
        return cell


def _with_defined_pow(fn, glob: dict, closure):
    """``fn`` recompiled from its source with ``a ** b`` calling ``dsl.lang.builtins.pow_``, or None
    when it has no ``**``.

    numpy raises on an integer ``** negative`` and Python gives a float, while the language
    defines an integer (docs/language.md, Semantics).  Only ``**`` changes: the file name
    and line numbers stay the user's, so tracebacks, pdb and ``breakpoint()`` still work."""
    import ast

    from dsl.lang.frontend import source_of
    try:
        src, lines, firstline, filename = source_of(fn)
    except Exception:  # noqa: BLE001 - no source: run the original code
        return None
    if "**" not in src:
        return None
    tree = ast.parse(src)
    indent = len(lines[0]) - len(lines[0].lstrip())
    for node in ast.walk(tree):  # columns of the user's file, not of the dedented source
        if indent and getattr(node, "col_offset", None) is not None:
            node.col_offset += indent
            if getattr(node, "end_col_offset", None) is not None:
                node.end_col_offset += indent
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef) or not _PowToCall().has_pow(fdef):
        return None
    fdef.decorator_list = []
    fdef = _PowToCall().visit(fdef)
    free = fn.__code__.co_freevars
    outer = ast.FunctionDef(name="__opdsl_outer__", args=ast.arguments(
        posonlyargs=[], args=[ast.arg(arg=n) for n in free], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[fdef, ast.Return(ast.Name(fdef.name, ast.Load()))], decorator_list=[])
    module = ast.Module(body=[outer], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, firstline - 1)
    scope: dict = {}
    exec(compile(module, filename, "exec"), glob, scope)  # noqa: S102 - the user's own kernel source
    values = [c.cell_contents for c in closure or ()]
    new = scope["__opdsl_outer__"](*values)
    new.__defaults__ = fn.__defaults__
    return new


class _PowToCall(Visitor):
    """``a ** b`` and ``x **= b`` -> ``__opdsl_pow__(a, b)`` (the interpreter's kernel builtin).

    A pass over a Python AST on the compiler's visitor convention: ``visit_BinOp`` and
    ``visit_AugAssign`` rewrite, every other node (``unsupported``) just has its children
    visited and replaced."""

    def has_pow(self, node) -> bool:
        import ast
        return any(isinstance(n, (ast.BinOp, ast.AugAssign)) and isinstance(n.op, ast.Pow) for n in ast.walk(node))

    def unsupported(self, node, *context):
        import ast
        for field, old in ast.iter_fields(node):
            if isinstance(old, list):
                old[:] = [self.visit(x) if isinstance(x, ast.AST) else x for x in old]
            elif isinstance(old, ast.AST):
                setattr(node, field, self.visit(old))
        return node

    def visit_BinOp(self, n):
        import ast
        self.unsupported(n)
        if not isinstance(n.op, ast.Pow):
            return n
        return ast.copy_location(ast.Call(ast.Name("__opdsl_pow__", ast.Load()), [n.left, n.right], []), n)

    def visit_AugAssign(self, n):
        import ast
        self.unsupported(n)
        if not isinstance(n.op, ast.Pow):
            return n
        target = ast.copy_location(type(n.target)(**{**vars(n.target), "ctx": ast.Load()}), n.target)
        call = ast.copy_location(ast.Call(ast.Name("__opdsl_pow__", ast.Load()), [target, n.value], []), n)
        return ast.copy_location(ast.Assign([n.target], call), n)


_WEAK_TYPES = {bool: T.WEAK_BOOL, int: T.WEAK_INT, float: T.WEAK_FLOAT}
_WEAK_STRONG = {bool: T.bool_, int: T.i64, float: T.f64}


def _specializations(kernel: ir.Kernel, fn) -> Dict[tuple, ir.Function]:
    """The checker's specializations of helper ``fn`` (same ``FuncOrigin``), by the argument
    types they were specialized for (``Function.arg_types``; weak for Python numbers)."""
    origin = ir.FuncOrigin.of(fn)
    return {f.arg_types: f for f in kernel.funcs if f.origin == origin}


def _type_of(v) -> Optional[T.DType]:
    """The type the checker gives argument value ``v``: numpy scalars their dtype, Python numbers weak."""
    if isinstance(v, np.generic):
        return T.from_numpy(v.dtype)
    if isinstance(v, B.Lanes):
        return T.SimdType(T.from_numpy(v.dtype), v.size)
    return _WEAK_TYPES.get(type(v))


def _typed_helper(fn, specs: Dict[tuple, ir.Function]):
    """``fn`` called as the compiled code calls it: arguments converted to annotated
    parameter types, the result to the checker's joined return type."""
    def call(*args):
        types_ = tuple(_type_of(a) for a in args)
        key = types_ if types_ in specs else None
        if key is None:  # an annotated parameter fixed the specialization's type, or a tensor is passed
            fits = [k for k in specs if len(k) == len(args) and all(
                _tensor_fits(a, p) if isinstance(p, ir.TensorArg) else not isinstance(a, Tensor) and (
                    p == t or not p.weak) for p, a, t in zip(k, args, types_))]
            exact = [k for k in fits if all(isinstance(p, ir.TensorArg) or p == t for p, t in zip(k, types_))]
            key = (exact or fits)[0] if len(fits) == 1 or exact or any(
                isinstance(p, ir.TensorArg) for k in fits for p in k) else None
        if key is None:
            return fn(*args)
        f = specs[key]
        out = fn(*(a if t == k or isinstance(k, ir.TensorArg) else _convert(a, p.dtype)
                   for a, t, k, p in zip(args, types_, key, f.params)))
        ret = f.ret
        if ret is None:  # a statement function
            return out
        if isinstance(ret, T.SimdType):
            return out if out.dtype == ret.elem.compute.np else _lanes_as(out, ret)
        if isinstance(out, np.generic):
            return out if out.dtype == ret.compute.np else _convert(out, ret)
        return out if _WEAK_STRONG.get(type(out)) == ret else _convert(out, ret)

    call.__name__, call.__qualname__, call.__wrapped__ = fn.__name__, fn.__qualname__, fn
    return call


def _tensor_fits(a, p: "ir.TensorArg") -> bool:
    """Whether tensor argument ``a`` is one specialization ``p`` was made for (dtype and rank)."""
    return isinstance(a, Tensor) and a.dsl_dtype == p.dtype and a.ndim == p.ndim


def _lanes_as(v, t: "T.SimdType"):
    """SIMD value (or scalar, broadcast) ``v`` as lanes of ``t``'s element type."""
    return np.broadcast_to(np.asarray(v).astype(t.elem.compute.np), (t.lanes,)).copy().view(B.Lanes)


def _convert(v, dtype: T.DType):
    """``dtype(v)`` with the compiled cast's wrap-around for out-of-range integers."""
    if isinstance(dtype, T.SimdType):
        return _lanes_as(v, dtype)
    try:
        return dtype(v)
    except OverflowError:
        return np.asarray(v).astype(dtype.np)[()]


class InterpreterBackend(Backend):
    name = "interpreter"

    def compile(self, request: CompileRequest) -> Launcher:
        return InterpreterLauncher(request)

    def source(self, request: CompileRequest) -> str:
        k = request.kernel
        head = (f"# interpreter backend: this Python function runs as {k.threads} thread(s) per tile\n"
                "# on Python threads; print(), pdb and breakpoint() work on its lines.\n")
        try:
            return head + inspect.getsource(request.pyfunc)
        except (OSError, TypeError):
            return head + ir.dump(k)

    def target(self) -> TargetInfo:
        """The host CPU: the interpreter runs there (numpy does its arithmetic), so an op's select
        hook picks the same kernel here as on numba, which the interpreter checks."""
        return host.host()


BACKEND = InterpreterBackend()
