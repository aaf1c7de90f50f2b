"""``Model.profile(feeds, repeat=...)``: where the time of a run goes, node by node.

A planned model runs a flat list of launches; each plan records which launches belong to
which node (``_Plan.spans``), so the profiler replays the same launches the model runs,
on the same buffers, with a clock read between nodes.  The clock reads are the only
thing added to a normal run.  Models whose shapes depend on run-time values run node by
node anyway; the profiler times them through ``Model._run_by_node``'s ``on_node`` hook.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from dsl.opgraph.spec import describe


@dataclass
class NodeTime:
    """One node's line of a profile."""
    name: str
    op_type: str            # domain::op_type for custom domains
    impl: str               # the key of the op's kernel the backend chose ("default", "nchwc16", ...)
    mean_s: float           # mean seconds per run
    share: float            # of the sum of every node's mean
    shape: Tuple            # output shape (the first output's; see shapes)
    shapes: Tuple[Tuple, ...] = ()
    launches: int = 0       # kernel launches per run (0: run() called directly or nothing to compute)


class Profile:
    """Per-node timings of a model: ``rows`` in graph order, ``total_s`` their sum."""

    def __init__(self, model_name: str, backend: str, repeat: int, rows: List[NodeTime], wall_s: float):
        self.model_name, self.backend, self.repeat = model_name, backend, repeat
        self.rows = rows
        self.total_s = sum(r.mean_s for r in rows)
        self.wall_s = wall_s  # mean seconds per whole profiled run (clock reads included)

    def slowest(self, n: Optional[int] = None) -> List[NodeTime]:
        ordered = sorted(self.rows, key=lambda r: r.mean_s, reverse=True)
        return ordered if n is None else ordered[:n]

    def by_op_type(self) -> List[Tuple[str, int, float, float]]:
        """(op_type, nodes, seconds, share) per op type, slowest first."""
        acc: Dict[str, List[float]] = {}
        for r in self.rows:
            a = acc.setdefault(r.op_type, [0, 0.0])
            a[0] += 1
            a[1] += r.mean_s
        total = self.total_s or 1.0
        return sorted(((k, n, s, s / total) for k, (n, s) in acc.items()), key=lambda t: t[2], reverse=True)

    def table(self, rows: Optional[List[NodeTime]] = None) -> str:
        """A fixed-width text table of ``rows`` (default: all, graph order)."""
        rows = self.rows if rows is None else rows
        head = ("node", "op", "impl", "mean", "share", "output shape")
        body = [(r.name, r.op_type, r.impl, format_seconds(r.mean_s), f"{100 * r.share:5.1f}%", _shape(r.shape))
                for r in rows]
        widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
        right = (False, False, False, True, True, False)
        fmt = lambda cells: "  ".join((c.rjust(w) if r else c.ljust(w))  # noqa: E731
                                      for c, w, r in zip(cells, widths, right)).rstrip()
        return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])

    def __str__(self) -> str:
        return (f"profile of {self.model_name!r} [{self.backend}], mean of {self.repeat} run(s): "
                f"{format_seconds(self.total_s)} in {len(self.rows)} nodes\n{self.table()}")

    def to_markdown(self, rows: Optional[List[NodeTime]] = None) -> str:
        rows = self.rows if rows is None else rows
        lines = ["| node | op | impl | mean | share | output shape |", "|---|---|---|---:|---:|---|"]
        lines += [f"| {r.name} | {r.op_type} | {r.impl} | {format_seconds(r.mean_s)} | {100 * r.share:.1f}% | "
                  f"{_shape(r.shape)} |" for r in rows]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Profile {self.model_name!r} [{self.backend}]: {len(self.rows)} nodes, {format_seconds(self.total_s)}>"


def format_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def _value_shape(v) -> tuple:
    """An output's shape; a sequence shows its length, an empty optional nothing."""
    if v is None:
        return ("None",)
    if isinstance(v, list):
        return (f"seq[{len(v)}]",)
    return tuple(v.shape)


def _shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + (",)" if len(shape) == 1 else ")")


def _impl_name(node, impl) -> str:
    return next((k for k, v in node.op.kernels.items() if v is impl), getattr(impl, "__name__", "?"))


def profile_model(model, feeds: Mapping[str, Any], repeat: int = 10, warmup: int = 1) -> Profile:
    """Run ``model`` ``warmup + repeat`` times on ``feeds``, timing every node of the last ``repeat``."""
    if not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"profile: repeat must be an integer >= 1, got {repeat!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"profile: warmup must be an integer >= 0, got {warmup!r}")
    arrays = model._check_feeds(feeds)
    if model._host:  # sequences / optionals: every run goes node by node
        pool = None
    else:
        key = tuple(a.shape for a in arrays)
        pool = model._plans.get(key)
        if pool is None:
            pool = model._plan_for(arrays, key)
    nodes = model.graph.nodes
    totals = {n.name: 0.0 for n in nodes}
    shapes: Dict[str, Tuple] = {}
    launches: Dict[str, int] = {}
    impls: Dict[str, Any] = {}  # what select chose for these shapes (graphs with None dims)
    wall = 0.0
    clock = time.perf_counter
    if not hasattr(pool, "checkout"):  # the model's marker for shapes that depend on run-time values
        state = {"timed": False, "node": None, "since": 0.0}

        def on_node(n, values):  # called as each node starts, and once at the end
            now, prev = clock(), state["node"]
            if prev is not None:
                if state["timed"]:
                    totals[prev.name] += now - state["since"]
                shapes[prev.name] = tuple(_value_shape(values[t.name]) for t in prev.outputs if t.name in values)
            state["node"], state["since"] = n, now
        for r in range(warmup + repeat):
            state["timed"], state["node"] = r >= warmup, None
            start = clock()
            model._run_by_node(arrays, on_node=on_node)
            if r >= warmup:
                wall += clock() - start
    else:
        plan = pool.checkout()
        try:
            for buf, a in zip(plan.inputs, arrays):
                buf[...] = a
            steps = plan.steps
            for n, lo, hi in plan.spans:
                shapes[n.name] = tuple(tuple(plan.specs[t.name].shape) for t in n.outputs)
                launches[n.name] = hi - lo
                impls[n.name] = model._impl_for(n, [None if t is None else plan.specs[t.name] for t in n.inputs])
            for r in range(warmup + repeat):
                start = clock()
                for n, lo, hi in plan.spans:
                    t0 = clock()
                    for fn, args in steps[lo:hi]:
                        fn(*args)
                    if r >= warmup:
                        totals[n.name] += clock() - t0
                if r >= warmup:
                    wall += clock() - start
        finally:
            pool.checkin(plan)
    total = sum(totals.values()) or 1.0
    rows = []
    for n in nodes:
        mean = totals[n.name] / repeat
        out_shapes = shapes.get(n.name, ())
        rows.append(NodeTime(n.name, describe(n.op), _impl_name(n, impls.get(n.name, model._impls[n.name])), mean,
                             totals[n.name] / total, out_shapes[0] if out_shapes else (), out_shapes,
                             launches.get(n.name, 0)))
    return Profile(model.graph.name, model.backend, repeat, rows, wall / repeat)
