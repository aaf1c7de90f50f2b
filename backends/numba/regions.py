"""The team on the CPU: ``sync()`` by region splitting, and the generated module's layout.

A kernel without ``sync()`` is one ``thread`` function; the entries run it for
every (tile, thread), in a ``prange`` for the parallel variant.

A kernel with ``sync()`` is cut at each barrier into regions, as PoCL does.
Each region is an njit function run by every live thread of the team before
the next region starts, so a barrier is just the end of a (parallel) loop:
no thread ever waits on another, whatever the core count.  Control flow that
contains a barrier (uniform by the checker's guarantee) runs once for the team,
reading its condition and bounds from the first live thread's copy.  Locals
that cross a region boundary (or are carried around a team loop) live in
per-thread arrays ``_st_<name>[thread]``.  A region reports how each thread
left it in ``_status``: a ``break``/``continue`` of a team loop, or a
``return`` which marks the thread done for every later region.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Union

from dsl.lang import ir
from dsl.lang import types as T
from dsl.lang.errors import CompileError
from backends.numba import ir_simplify
from backends.numba.simd_codegen import check_regions
from backends.numba.codegen import FASTMATH, LOG_ARG, MODULE_IMPORTS, Gen, Hooks, Scope, cast, ctype, emit_function, storage_np

FALL, BREAK, CONTINUE = 0, 1, 2

# --------------------------------------------------------------------------- team structure


@dataclass
class Region:
    index: int
    stmts: tuple
    in_loop: bool  # inside a team-level loop: run again each iteration


@dataclass
class TeamIf:
    stmt: ir.If
    body: list
    orelse: list


@dataclass
class TeamLoop:
    stmt: Union[ir.For, ir.While]
    body: list


TeamNode = Union[Region, TeamIf, TeamLoop]


def split(stmts: Sequence[ir.Stmt], regions: List[Region], in_loop: bool = False) -> List[TeamNode]:
    """Cut ``stmts`` at every Sync into regions; sync-containing If/For/While stay team-level."""
    out: List[TeamNode] = []
    cur: List[ir.Stmt] = []

    def flush():
        if cur:
            r = Region(len(regions), tuple(cur), in_loop)
            regions.append(r)
            out.append(r)
            cur.clear()

    for s in stmts:
        if isinstance(s, ir.Sync):
            flush()
        elif not ir.contains_sync([s]):
            cur.append(s)
        elif isinstance(s, ir.If):
            flush()
            out.append(TeamIf(s, split(s.body, regions, in_loop), split(s.orelse, regions, in_loop)))
        elif isinstance(s, (ir.For, ir.While)):
            flush()
            out.append(TeamLoop(s, split(s.body, regions, True)))
        else:
            raise CompileError(f"sync() inside a {type(s).__name__} statement is not supported",
                               getattr(s, "loc", None))
    flush()
    return out


def _shallow(stmts: Sequence[ir.Stmt]):
    """Statements of a region outside any loop nested in it (where break/continue leave the region)."""
    for s in stmts:
        yield s
        if isinstance(s, ir.If):
            yield from _shallow(s.body)
            yield from _shallow(s.orelse)


def escapes(region: Region) -> Set[type]:
    """Which of Break/Continue/Return can leave ``region`` (not counting loops inside it)."""
    kinds = {type(s) for s in _shallow(region.stmts) if isinstance(s, (ir.Break, ir.Continue))}
    if any(isinstance(n, ir.Return) for n in ir.walk(list(region.stmts))):
        kinds.add(ir.Return)
    return kinds


def exposed_reads(stmts: Sequence[ir.Stmt], assigned: Set[str]) -> Set[str]:
    """Names ``stmts`` may read before assigning them (``assigned``: definitely assigned before;
    updated in place with what ``stmts`` definitely assign).  A local none of whose regions
    reads it this way needs no per-thread home across barriers: each region sets it first
    (a SIMD accumulator in a team loop, say)."""
    out: Set[str] = set()

    def reads(*nodes):
        out.update(n.name for n in ir.walk(list(nodes)) if isinstance(n, ir.Name) and n.name not in assigned)
    for s in stmts:
        if isinstance(s, ir.Assign):
            reads(s.value)
            assigned.add(s.name)
        elif isinstance(s, ir.For):
            reads(s.start, s.stop, s.step)
            out.update(exposed_reads(s.body, assigned | {s.var}))
        elif isinstance(s, ir.While):
            reads(s.cond)
            out.update(exposed_reads(s.body, set(assigned)))
        elif isinstance(s, ir.If):
            reads(s.cond)
            then, other = set(assigned), set(assigned)
            out.update(exposed_reads(s.body, then))
            out.update(exposed_reads(s.orelse, other))
            assigned.update(then & other)
        else:
            reads(s)
    return out


# --------------------------------------------------------------------------- what code uses

@dataclass
class Uses:
    names: Set[str] = field(default_factory=set)      # locals and scalar params read or written
    assigned: Set[str] = field(default_factory=set)   # locals written
    buffers: Set[str] = field(default_factory=set)    # tensors, vecs, scratch
    shapes: Set[tuple] = field(default_factory=set)   # (tensor, axis)
    sizes: Set[str] = field(default_factory=set)


def uses_of(nodes, k: ir.Kernel, checked: bool = False) -> Uses:
    """What ``nodes`` read and write; ``checked`` (debug mode): every shape/size a bounds check needs."""
    u = Uses()
    ndim = {p.name: p.ndim for p in k.params if isinstance(p, ir.TensorParam)}
    for n in ir.walk(list(nodes)):
        if isinstance(n, ir.Name):
            u.names.add(n.name)
        elif isinstance(n, ir.Assign):
            u.names.add(n.name)
            u.assigned.add(n.name)
        elif isinstance(n, ir.For):
            u.names.add(n.var)
            u.assigned.add(n.var)
        elif isinstance(n, (ir.Load, ir.Store, ir.AtomicAdd, ir.AtomicFetchAdd)):
            u.buffers.add(n.tensor)
            if not n.flat and n.tensor in ndim:
                u.shapes.update((n.tensor, d) for d in range(0 if checked else 1, ndim[n.tensor]))
            elif checked and n.tensor in ndim:
                u.sizes.add(n.tensor)
        elif isinstance(n, (ir.VLoad, ir.VStore)):  # flat; checked per lane in debug mode
            u.buffers.add(n.tensor)
            if checked and n.tensor in ndim:
                u.sizes.add(n.tensor)
        elif isinstance(n, ir.Shape):
            if n.tensor in ndim:
                u.shapes.add((n.tensor, n.axis))
        elif isinstance(n, ir.Size):
            if n.tensor in ndim:
                u.sizes.add(n.tensor)
        elif isinstance(n, ir.TensorRef):  # passed whole to a @dsl.func: with its shape and size
            u.buffers.add(n.tensor)
            if n.tensor in ndim:
                u.shapes.update((n.tensor, d) for d in range(ndim[n.tensor]))
                u.sizes.add(n.tensor)
    return u


def _team_exprs(nodes: List[TeamNode]) -> List[ir.Expr]:
    out: List[ir.Expr] = []
    for n in nodes:
        if isinstance(n, TeamIf):
            out.append(n.stmt.cond)
            out += _team_exprs(n.body) + _team_exprs(n.orelse)
        elif isinstance(n, TeamLoop):
            s = n.stmt
            out += [s.start, s.stop, s.step] if isinstance(s, ir.For) else [s.cond]
            out += _team_exprs(n.body)
    return out


def _team_loop_vars(nodes: List[TeamNode]) -> Set[str]:
    out: Set[str] = set()
    for n in nodes:
        if isinstance(n, TeamIf):
            out |= _team_loop_vars(n.body) | _team_loop_vars(n.orelse)
        elif isinstance(n, TeamLoop):
            if isinstance(n.stmt, ir.For):
                out.add(n.stmt.var)
            out |= _team_loop_vars(n.body)
    return out


# --------------------------------------------------------------------------- the program

class Program:
    """Generates the whole module for one kernel specialization."""

    def __init__(self, kernel: ir.Kernel, log_level: str = "debug", key: str = "", fastmath: bool = False,
                 debug: bool = False, interrupt: bool = True):
        kernel = ir_simplify.kernel(kernel, debug)  # what numba's front end would type for nothing
        self.k = kernel
        self.key = key
        self.fastmath = fastmath
        self.debug = debug
        self.gen = Gen(kernel, log_level, fastmath, debug, interrupt)
        # hidden arguments of every function: the Ctrl-C counter and its value at launch, the error
        # record, the run-time log threshold (backends/log_gate.py; last: NumbaLauncher._run_logged appends it)
        self.hidden = ["_intr", "_intr0"] + (["_err"] if self.gen.record else []) + ([LOG_ARG] if self.gen.gated else [])
        self.names = self.gen.names
        self.threads = kernel.threads
        self.has_sync = ir.contains_sync(list(kernel.body))
        self.regions: List[Region] = []
        self.team: List[TeamNode] = split(kernel.body, self.regions) if self.has_sync else []
        check_regions(kernel, [r.stmts for r in self.regions])
        self.states: List[str] = self._state_vars() if self.has_sync else []
        self.has_return = any(ir.Return in escapes(r) for r in self.regions)
        self.has_escape = any(escapes(r) & {ir.Break, ir.Continue} for r in self.regions)

    # ----------------------------------------------------------------- analysis

    def _state_vars(self) -> List[str]:
        """Locals needing a per-thread array: they cross a region boundary or a team loop iteration."""
        locals_ = self.gen.local_names
        seen: Dict[str, int] = {}
        exposed: Set[str] = set()
        carried: Set[str] = set()
        for r in self.regions:
            exposed |= exposed_reads(r.stmts, set())
            for n in self.uses(r.stmts).names & locals_:
                seen[n] = seen.get(n, 0) + 1
                if r.in_loop or seen[n] > 1:
                    carried.add(n)
        state = carried & exposed
        for e in _team_exprs(self.team):
            state |= self.uses([e]).names & locals_
        state |= _team_loop_vars(self.team)
        order = [n for n, _ in self.k.locals] + sorted(self.gen.assigned_params)
        return [n for n in dict.fromkeys(order) if n in state]

    def uses(self, nodes) -> Uses:
        return uses_of(nodes, self.k, self.debug)

    def stop_condition(self) -> str:
        """Team-level code true when the launch must stop (Ctrl-C, or a failed check in debug mode)."""
        return self.gen.stop_condition(Hooks())

    def local_type(self, name: str) -> T.DType:
        return ctype(self.gen.types[name])

    # ----------------------------------------------------------------- argument lists

    def tensor_params(self) -> List[ir.TensorParam]:
        return [p for p in self.k.params if isinstance(p, ir.TensorParam)]

    def flat_args(self, u: Optional[Uses] = None, states: Sequence[str] = ()) -> List[str]:
        """Arguments a thread/region/team function takes (all of them when ``u`` is None)."""
        out: List[str] = []
        for p in self.k.params:
            nm = self.names[p.name]
            if isinstance(p, ir.TensorParam):
                if u is None or p.name in u.buffers:
                    out.append(nm)
                out += [f"{nm}_shape{d}" for d in range(p.ndim) if u is None or (p.name, d) in u.shapes]
                if u is None or p.name in u.sizes:
                    out.append(f"{nm}_size")
            elif isinstance(p, ir.VecParam):
                if u is None or p.name in u.buffers:
                    out.append(nm)
            elif u is None or (p.name in u.names and p.name not in states):
                out.append(nm)
        for s in self.k.scratch:
            if u is None or s.name in u.buffers:
                out.append(self.names[s.name])
        return out

    def prelude(self) -> List[str]:
        """Entry-point lines flattening each tensor and naming its shape; Zeroed tensors set to 0."""
        lines = []
        for p in self.tensor_params():
            nm = self.names[p.name]
            src = f"{nm}_nd"
            lines.append(f"    {nm} = {src}" if p.ndim == 1 else f"    {nm} = vw.flat({src})")
            for d in range(p.ndim):
                lines.append(f"    {nm}_shape{d} = {src}.shape[{d}]")
            lines.append(f"    {nm}_size = {nm}.size")
            if p.access == "zeroed":  # Zeroed[...]: every launch starts from zeros (frozen ones too)
                lines.append(f"    {nm}[:] = 0")
        return lines

    def entry_params(self, nd: bool = False) -> str:
        """The arguments of an entry point: a 1-d one takes the team count ``_grid``, an n-d one
        (``_nd``, compiled on first use) the grid shape."""
        grid = ["_gx", "_gy", "_gz"] if nd else ["_grid"]
        return ", ".join([f"{self.names[p.name]}_nd" if isinstance(p, ir.TensorParam) else self.names[p.name]
                          for p in self.k.params] + grid + self.hidden)

    @staticmethod
    def grid_prelude(nd: bool = False) -> List[str]:
        """Entry-point lines naming the flat team count ``_grid`` and the grid shape ``_ntiles``
        (gx, gy, gz) that team functions get (dsl.tile_id(axis), dsl.num_tiles(axis))."""
        if nd:
            return ["    _grid = _gx * _gy * _gz  # teams in the flattened grid, axis 0 fastest",
                    "    _ntiles = (_gx, _gy, _gz)"]
        return ["    _ntiles = (_grid, np.int64(1), np.int64(1))  # a 1-d grid"]

    def scratch_alloc(self, pad: str, per_tile: bool = False) -> List[str]:
        lines = []
        for s in self.k.scratch:
            size = 1
            for d in s.shape:
                size *= d
            shape = f"(_grid, {size})" if per_tile else str(size)
            suffix = "_tiles" if per_tile else ""
            alloc = "rt.empty" if per_tile else "np.empty"  # per_tile: inside a parallel function
            lines.append(f"{pad}{self.names[s.name]}{suffix} = {alloc}({shape}, {storage_np(s.dtype)})"
                         f"  # scratch {s.name}: {s.dtype}{list(s.shape)}")
        return lines

    # ----------------------------------------------------------------- module

    def source(self) -> str:
        k = self.k
        out = [f'"""opdsl numba backend: kernel {k.name!r}, {k.threads} threads per team.',
               "",
               f"Generated from {k.filename}:{k.firstline} (specialization {self.key or '-'}).",
               "Edit the kernel, not this file; `# py:N` comments point at its source lines.",
               '"""',
               *MODULE_IMPORTS,
               "",
               "CACHE = True  # numba stores machine code beside this file (False without a disk cache)",
               *self.jit_options(),
               "ix = np.uint64  # tensor offsets: unsigned, so numba skips negative-index wrap-around",
               ""]
        helpers_at = len(out)
        for f in k.funcs:
            out += ["", *emit_function(self.gen, f), ""]
        if self.has_sync:
            for r in self.regions:
                out += ["", *self.region_function(r), ""]
            out += ["", *self.team_function(False), ""]
            out += ["", *self.dispatch_functions(), ""]
        else:
            out += ["", *self.thread_function(), ""]
        out += ["", *self.entry(False), "", "", *self.entry(True)]
        out += ["", "", *self.entry(False, nd=True), "", "", *self.entry(True, nd=True)]
        if self.has_sync:
            out += ["", "", *self.team_function(True)]
        helpers = [line for h in self.gen.simd_helpers.values() for line in ["", *h, ""]]
        out[helpers_at:helpers_at] = helpers  # defined before the functions calling them
        return "\n".join(out).rstrip() + "\n"

    def jit_options(self) -> List[str]:
        body = ["# functions only other compiled functions call: no Python or C wrapper to build (a cold",
                "# compile builds and optimizes each wrapper, and the entries only need their own)",
                "# and numba's pipeline without the passes generated code does not need (backends/numba/pipeline.py)",
                "BODY = dict(JIT, no_cpython_wrapper=True, no_cfunc_wrapper=True, pipeline_class=pl.Lean)"]
        if not self.fastmath:
            return ['JIT = dict(nogil=True, error_model="numpy", cache=CACHE)', *body]
        flags = ", ".join(f'"{f}"' for f in FASTMATH)
        return ["# fastmath=True: float arithmetic may be reassociated (vectorized sums); NaN and inf keep",
                "# their meaning (no nnan/ninf flags)",
                f'JIT = dict(nogil=True, error_model="numpy", cache=CACHE, fastmath={{{flags}}})', *body]

    # ----------------------------------------------------------------- no sync: one thread function

    def thread_function(self) -> List[str]:
        u = self.uses(self.k.body)
        args = ["_tid", "_tile", "_ntiles"] + self.flat_args(u) + self.hidden
        out = ["@njit(**BODY)", f"def thread({', '.join(args)}):",
               f'    """The body of {self.k.name} for thread _tid of tile _tile."""']
        out += self.gen.wide_vectors(self.k.body) + self.gen.tile_prologue(self.k.body)
        out = self.gen.block(self.k.body, Scope(self.names), Hooks(), 1, out=out)
        return out + self.gen.tile_epilogue(self.k.body)

    # ----------------------------------------------------------------- sync: regions and the team

    def region_args(self, r: Region):
        u = self.uses(r.stmts)
        states = [n for n in self.states if n in u.names]
        esc = escapes(r)
        extra = [f"_st_{self.names[n]}" for n in states]
        if self.has_return:
            extra.append("_done")
        if esc & {ir.Break, ir.Continue}:
            extra.append("_status")
        return u, states, self.flat_args(u, states) + extra + self.hidden, esc

    def region_function(self, r: Region) -> List[str]:
        u, states, args, esc = self.region_args(r)
        lines = [s.loc.line for s in ir.walk(list(r.stmts)) if getattr(s, "loc", None) and s.loc.line > 0]
        where = f" (py:{min(lines)}-{max(lines)})" if lines else ""
        out = ["@njit(**BODY)", f"def region_{r.index}({', '.join(['_tid', '_tile', '_ntiles'] + args)}):",
               f'    """Region {r.index}{where}: run by every live thread between barriers."""']
        out += self.gen.wide_vectors(r.stmts) + self.gen.tile_prologue(r.stmts)
        if self.has_return:
            out += ["    if _done[_tid]:  # this thread returned earlier", "        return"]
        out += [f"    {self.names[n]} = _st_{self.names[n]}[_tid]" for n in states]
        saves = [f"_st_{self.names[n]}[_tid] = {self.names[n]}" for n in states if n in u.assigned]
        hooks = _RegionHooks(saves)
        self.gen.block(r.stmts, Scope(self.names), hooks, 1, out=out)
        tail = list(saves) + (["_status[_tid] = 0"] if esc & {ir.Break, ir.Continue} else [])
        out += ["    " + x for x in tail]
        return out + self.gen.tile_epilogue(r.stmts)

    def team_args(self) -> List[str]:
        """What a region may need from its team: every argument, scratch, per-thread arrays, flags."""
        out = self.flat_args() + [f"_st_{self.names[n]}" for n in self.states]
        if self.has_return:
            out.append("_done")
        if self.has_escape:
            out.append("_status")
        return out + self.hidden

    def dispatch_functions(self) -> List[str]:
        """``run_threads``: the one prange of a team, running region ``_which`` for every thread.

        Keeping the team's control flow out of parallel functions keeps numba's parfor passes
        (slow to compile, and prone to reordering array reads around loops) away from it.
        """
        args = ", ".join(["_which", "_t", "_tile", "_ntiles"] + self.team_args())
        out = ["@njit(**BODY)", f"def dispatch({args}):",
               '    """Run region _which for thread _t."""']
        for r in self.regions:
            _u, _s, rargs, _e = self.region_args(r)
            out += [f"    {'if' if r.index == 0 else 'elif'} _which == {r.index}:",
                    f"        region_{r.index}({', '.join(['_t', '_tile', '_ntiles'] + rargs)})"]
        pargs = ", ".join(["_which", "_tile", "_ntiles"] + self.team_args())
        out += ["", "", "@njit(parallel=True, **JIT)", f"def run_threads({pargs}):",
                f'    """Region _which for the {self.threads} threads of a team, in parallel (the barrier is the loop end)."""',
                f"    for _t in prange({self.threads}):",
                f"        dispatch({args.replace('_which, _t', '_which, np.int64(_t)', 1)})"]
        return out

    def team_function(self, parallel: bool) -> List[str]:
        """One team: scratch and per-thread copies, then regions under the team's control flow.

        ``team_serial`` runs each region's threads one after the other; ``launch_team`` (one
        team, grid == 1) hands each region to ``run_threads``.
        """
        T_ = self.threads
        if parallel:
            out = ["@njit(**JIT)", f"def launch_team({self.entry_params()}):",
                   f'    """Run one team of {self.k.name}, each region\'s {T_} threads in parallel."""']
            # np.int64(): a plain 0 would make numba compile literal-typed copies of every callee
            out += self.prelude() + self.grid_prelude() + ["    _tile = np.int64(0)"]
        else:
            out = ["@njit(**BODY)",
                   f"def team_serial({', '.join(['_tile', '_ntiles'] + self.flat_args_without_scratch() + self.hidden)}):",
                   f'    """One team of {T_} threads, one after the other in each region."""']
        out += self.scratch_alloc("    ")
        for n in self.states:
            t = self.local_type(n)
            nm = self.names[n]
            if n in self.gen.assigned_params:
                out.append(f"    _st_{nm} = np.full({T_}, {nm})  # {n}: {t}, one copy per thread")
            else:
                out.append(f"    _st_{nm} = np.zeros({T_}, {np_ctor(t)})  # {n}: {t}, one copy per thread")
        if self.has_return:
            out.append(f"    _done = np.zeros({T_}, np.bool_)")
        if self.has_escape:
            out.append(f"    _status = np.zeros({T_}, np.int8)")
        out.append("    _lead = 0  # the thread whose copies decide team-level control flow")
        scope = Scope(self.names, tid="_lead", local=lambda n: f"_st_{self.names[n]}[_lead]")
        self._team_block(self.team, scope, parallel, 1, 0, out)
        return out

    def _team_block(self, nodes, scope, parallel, depth, loops, out) -> None:
        pad = "    " * depth
        start = len(out)
        for n in nodes:
            if isinstance(n, Region):
                _u, _s, args, esc = self.region_args(n)
                if parallel:
                    out.append(f"{pad}run_threads({', '.join([f'np.int64({n.index})', '_tile', '_ntiles'] + self.team_args())})")
                else:
                    out += [f"{pad}for _t in range({self.threads}):",
                            f"{pad}    region_{n.index}({', '.join(['_t', '_tile', '_ntiles'] + args)})"]
                if self.stop_condition():  # every thread takes the same exit: later regions never run
                    out += [f"{pad}if {self.stop_condition()}:", f"{pad}    return"]
                if ir.Return in esc:
                    out += [f"{pad}_lead = rt.first_live(_done)", f"{pad}if _lead < 0:", f"{pad}    return"]
                if ir.Break in esc:
                    out += [f"{pad}if _status[_lead] == {BREAK}:", f"{pad}    break"]
                if ir.Continue in esc:
                    out += [f"{pad}if _status[_lead] == {CONTINUE}:", f"{pad}    continue"]
            elif isinstance(n, TeamIf):
                out.append(f"{pad}if {self.gen.typed(n.stmt.cond, T.bool_, scope)}:  # team-uniform")
                self._team_block(n.body, scope, parallel, depth + 1, loops, out)
                if n.orelse:
                    out.append(f"{pad}else:")
                    self._team_block(n.orelse, scope, parallel, depth + 1, loops, out)
            else:
                s = n.stmt
                if isinstance(s, ir.For):
                    c = f"_c{loops}"
                    bounds = ", ".join(self.gen.typed(x, T.i64, scope) for x in (s.start, s.stop, s.step))
                    out.append(f"{pad}for {c} in range({bounds}):  # team-uniform")
                    value = cast(c, T.i64, self.gen.types.get(s.var, T.i64))
                    out.append(f"{pad}    _st_{self.names[s.var]}[:] = {value}")
                else:
                    out.append(f"{pad}while {self.gen.typed(s.cond, T.bool_, scope)}:  # team-uniform")
                if self.stop_condition():
                    out += [f"{pad}    if {self.stop_condition()}:", f"{pad}        return"]
                self._team_block(n.body, scope, parallel, depth + 1, loops + 1, out)
        if len(out) == start:
            out.append(pad + "pass")

    # ----------------------------------------------------------------- entries

    def entry(self, parallel: bool, nd: bool = False) -> List[str]:
        T_ = self.threads
        name = ("launch_parallel" if parallel else "launch_serial") + ("_nd" if nd else "")
        doc = ("every (tile, thread) pair in a prange" if parallel and not self.has_sync else
               "tiles in a prange" + ("" if nd else " (one team: launch_team)") if parallel else
               "tiles and threads one after the other (small launches)")
        out = [("@njit(parallel=True, **JIT)" if parallel else "@njit(**JIT)"),
               f"def {name}({self.entry_params(nd)}):",
               f'    """Run _grid teams of {self.k.name}{" (an n-d grid)" if nd else ""}: {doc}."""']
        out += self.prelude() + self.grid_prelude(nd)
        stop = self.stop_condition()
        if self.has_sync:
            args = ", ".join(self.flat_args_without_scratch() + self.hidden)
            if parallel:
                out += ["    for _tile in prange(_grid):"]
                call = f"team_serial(np.int64(_tile), _ntiles{_lead_comma(args)})"
                out += [f"        if not ({stop}):", f"            {call}"] if stop else [f"        {call}"]
            else:
                out += ["    for _tile in range(_grid):"]
                out += [f"        if {stop}:", "            return"] if stop else []
                out += [f"        team_serial(_tile, _ntiles{_lead_comma(args)})"]
            return out
        u = self.uses(self.k.body)
        args = self.flat_args(u) + self.hidden
        scratch = {self.names[s.name] for s in self.k.scratch}
        if parallel:
            out += self.scratch_alloc("    ", per_tile=True)
            call_args = [f"{a}_tiles[_tile]" if a in scratch else a for a in args]
            call = f"thread({', '.join([f'np.int64(_g) - _tile * {T_}', '_tile', '_ntiles'] + call_args)})"
            out += [f"    for _g in prange(_grid * {T_}):", f"        _tile = np.int64(_g) // {T_}"]
            out += [f"        if not ({stop}):", f"            {call}"] if stop else [f"        {call}"]
        else:
            out += self.scratch_alloc("    ")
            out += ["    for _tile in range(_grid):"]
            out += [f"        if {stop}:", "            return"] if stop else []
            out += [f"        for _tid in range({T_}):", f"            thread({', '.join(['_tid', '_tile', '_ntiles'] + args)})"]
        return out

    def flat_args_without_scratch(self) -> List[str]:
        scratch = {self.names[s.name] for s in self.k.scratch}
        return [a for a in self.flat_args() if a not in scratch]


class _RegionHooks(Hooks):
    def __init__(self, saves: List[str]):
        self.saves = saves

    def ret(self, stmt, gen, scope):
        return ["_done[_tid] = True", "return"]

    def escape(self, kind):
        code = BREAK if kind == "break" else CONTINUE
        return self.saves + [f"_status[_tid] = {code}", "return"]


def np_ctor(t: T.DType) -> str:
    return "np.bool_" if t.is_bool else f"np.{t.np.name}"


def _lead_comma(args: str) -> str:
    return f", {args}" if args else ""


def generate(kernel: ir.Kernel, log_level: str = "debug", key: str = "", fastmath: bool = False,
             debug: bool = False, interrupt: bool = True) -> str:
    """The Python source of the numba module for ``kernel``."""
    return Program(kernel, log_level, key, fastmath, debug, interrupt).source()
