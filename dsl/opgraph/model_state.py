"""What rebuilds a compiled ``Model`` without compiling its graph again: the graph after every pass,
its options, each node's kernel choice by name and the launch plans that pickle.  The model plan
cache (plan_cache.py) and the ``.opdsl`` artifact (artifact_save.py, artifact_load.py) both store
it; this module sits below model.py so ``Model.save`` can reach it without an upward import.
"""
from __future__ import annotations

import pickle

from dsl.opgraph.launch_plan import Launch

IMPL = "<impl>"            # a launch of the node's selected kernel: the kernel is not pickled
_SKIP = object()


def state_of(model) -> dict:
    """What rebuilds ``model``: its graph and options, kernel names and every launch plan whose
    kernels pickle by reference (packed weights included)."""
    names = {}
    for n in model.graph.nodes:
        impl = model._impls[n.name]
        names[n.name] = next(k for k, v in n.op.kernels.items() if v is impl)
    plans = []
    impl_by_id = {id(model._impls[n.name]): names[n.name] for n in model.graph.nodes}
    nodes = {n.name: n for n in model.graph.nodes}
    for (node, impl_id, key), launches in list(model._launch_plans.items()):
        impl_name = impl_by_id.get(impl_id)
        if impl_name is None or node not in nodes or nodes[node].op.kernels.get(impl_name) is None:
            continue
        entry = _portable(launches, nodes[node].op.kernels[impl_name])
        if entry is not _SKIP:
            plans.append((node, impl_name, key, entry))
    tiling = False if model.tiling == 0 else True if model.tiling < 0 else model.tiling
    return {"graph": model.graph, "backend": model.backend, "stats": model.stats, "impls": names,
            "max_tensor_bytes": model.max_tensor_bytes, "tiling": tiling, "concat_inplace": model.concat_inplace,
            "plans": plans}


def restore(state: dict, model_cls):
    """The ``model_cls`` (dsl.Model) ``state`` describes; kernels are selected again (as an unpickled
    model's are: generated ones exist once selected) and the stored launch plans seed its plans."""
    graph = state["graph"]
    impls = {n.name: n.op.implementation([None if t is None else t.spec for t in n.inputs], state["backend"])
             for n in graph.nodes}
    ops = {n.name: n.op for n in graph.nodes}
    seeded = {}
    for node, impl_name, key, launches in state["plans"]:
        impl = impls.get(node)
        if impl is None or ops[node].kernels.get(impl_name) is not impl:
            continue  # another choice than the stored plan's: asked again
        if launches is not None:
            launches = [Launch(impl if isinstance(x.kernel, str) else x.kernel, x.args, x.kwargs, x.grid, x.backend)
                        for x in launches]
        seeded[(node, id(impl), key)] = launches
    return model_cls(graph, state["backend"], impls, state["stats"], max_tensor_bytes=state["max_tensor_bytes"],
                     tiling=state["tiling"], concat_inplace=state["concat_inplace"], launch_plans=seeded)


def _portable(launches, impl):
    """``launches`` with the node's kernel as a token, or _SKIP when they hold a kernel that
    would not pickle by reference."""
    if launches is None:
        return None
    out = []
    for launch in launches:
        kernel = IMPL if launch.kernel is impl else launch.kernel
        if kernel is not IMPL:
            try:
                pickle.dumps(kernel)
            except Exception:
                return _SKIP
        out.append(Launch(kernel, launch.args, launch.kwargs, launch.grid, launch.backend))
    return out

