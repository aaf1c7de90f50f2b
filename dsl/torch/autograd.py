"""The backward of an opdsl op inside PyTorch's autograd, in this order:

1. the op's own ``backward(self, grad_outputs, inputs, outputs)`` hook (torch tensors in,
   one gradient or None per input out), which may call ops and kernels; for the library's
   arithmetic, activations and matrix products, the table in builtin_grads.py;
2. a composed op: its body is run again under autograd and differentiated through its ops;
3. an op whose implementation is one kernel launched by the default ``run``:
   ``dsl.grad(kernel)`` launched with the forward's arguments, the output gradients, and
   zeroed input-gradient buffers it adds into;
4. otherwise an error at backward time that names the op.
"""
from __future__ import annotations

import importlib
from typing import Optional, Sequence

import torch

from dsl.opgraph.op import _EAGER_BACKEND, Op
from dsl.opgraph.spec import TensorSpec, describe
from dsl.runtime.kernel import Kernel
from dsl.torch import tensors
from dsl.torch.builtin_grads import builtin_grad


def attach(reg) -> None:
    """Register autograd for a Registration (custom_op.py).  The backward is itself an opaque
    custom op (``<name>_backward``), so ``torch.compile`` traces it from its fake
    implementation instead of tracing into kernel launches."""
    n_out = reg.num_outputs
    sig = reg.signature
    params = sig.schema.split("*, ", 1)[1].rsplit(") ->", 1)[0]

    def run_backward(grads, inputs, outputs, needs, **kwargs):
        op = sig.decode(reg.cls, kwargs)
        found = input_grads(op, kwargs.get("backend"), grads, inputs, outputs, needs)
        return [torch.zeros_like(x) if g is None else g.contiguous()
                for g, x in zip(found, inputs) if x is not None]

    def fake_backward(grads, inputs, outputs, needs, **kwargs):
        return [torch.empty_like(x) for x in inputs if x is not None]

    grad_op = torch.library.custom_op(
        f"opdsl::{sig.name}_backward", run_backward, mutates_args=(),
        schema=f"(Tensor[] grads, Tensor?[] inputs, Tensor[] outputs, bool[] needs, *, {params}) -> Tensor[]")
    grad_op.register_fake(fake_backward)

    def setup_context(ctx, inputs, keyword_only_inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        ctx.opdsl_kwargs = dict(keyword_only_inputs)
        ctx.opdsl_inputs = len(inputs)
        ctx.opdsl_absent = [x is None for x in inputs]
        ctx.save_for_backward(*[x for x in inputs if x is not None], *outs)

    def backward(ctx, *grads):
        saved = list(ctx.saved_tensors)
        inputs = [None if absent else saved.pop(0) for absent in ctx.opdsl_absent]
        outputs = saved[:n_out]
        needs = [bool(n) for n in ctx.needs_input_grad[:ctx.opdsl_inputs]]
        if _traceable(reg.cls):  # torch operations (and opdsl ops): autograd and torch.compile see through
            op = sig.decode(reg.cls, ctx.opdsl_kwargs)
            return input_grads(op, ctx.opdsl_kwargs.get("backend"), grads, inputs, outputs, needs)
        found = iter(grad_op(list(grads), inputs, outputs, needs, **ctx.opdsl_kwargs))
        result = []
        for x, need in zip(inputs, needs):
            g = None if x is None else next(found)
            result.append(g if need else None)
        return tuple(result)

    reg.custom_op.register_autograd(backward, setup_context=setup_context)


def _traceable(cls) -> bool:
    """Backwards made of torch operations and ops: composed bodies and the built-in table."""
    return not callable(getattr(cls, "backward", None)) and (
        getattr(cls, "composed", False) or builtin_grad(cls) is not None)


def input_grads(op: Op, backend: Optional[str], grads: Sequence, inputs: Sequence, outputs: Sequence,
                needs: Sequence[bool]):
    """One gradient (or None) per input of ``op``."""
    cls = type(op)
    token = _EAGER_BACKEND.set(backend or _EAGER_BACKEND.get())
    try:
        if callable(getattr(cls, "backward", None)):
            result = op.backward(tuple(grads), tuple(inputs), tuple(outputs))
            return _checked(op, result, inputs, needs)
        builtin = builtin_grad(cls)
        if builtin is not None:
            return _checked(op, builtin(op, tuple(grads), tuple(inputs), tuple(outputs)), inputs, needs)
        if getattr(cls, "composed", False):
            return _through_body(op, grads, inputs, needs)
        impl = _single_kernel(op, inputs, backend)
        if impl is not None:
            return _from_kernel_grad(op, impl, backend, grads, inputs, outputs, needs)
    finally:
        _EAGER_BACKEND.reset(token)
    raise RuntimeError(f"{describe(op)} has no backward: define backward(self, grad_outputs, inputs, outputs) "
                       "returning one gradient per input, or implement it as one kernel launched by the default "
                       "run (differentiated by dsl.grad); see docs/torch.md")


def _checked(op: Op, result, inputs, needs):
    if isinstance(result, torch.Tensor) or result is None:
        result = (result,)
    result = tuple(result)
    if len(result) != len(inputs):
        raise RuntimeError(f"{describe(op)}.backward returned {len(result)} gradient(s) for {len(inputs)} input(s)")
    out = []
    for i, (g, x, need) in enumerate(zip(result, inputs, needs)):
        if g is None or not need:
            out.append(None)
            continue
        if not isinstance(g, torch.Tensor):
            g = torch.as_tensor(g)
        if tuple(g.shape) != tuple(x.shape):
            raise RuntimeError(f"{describe(op)}.backward: the gradient of input {i} has shape {tuple(g.shape)}, "
                               f"the input {tuple(x.shape)}")
        out.append(g.to(x.dtype))
    return tuple(out)


def _through_body(op: Op, grads, inputs, needs):
    """Recompute the composed op's body with autograd on and differentiate it."""
    with torch.enable_grad():
        leaves = [None if x is None else x.detach().requires_grad_(bool(need) and x.is_floating_point())
                  for x, need in zip(inputs, needs)]
        result = type(op).function(*leaves, **op.params)
        outs = result if isinstance(result, (tuple, list)) else (result,)
        wanted = [x for x in leaves if x is not None and x.requires_grad]
        pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, torch.Tensor) and o.requires_grad]
        found = torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True) \
            if wanted and pairs else [None] * len(wanted)
    by_leaf = dict(zip(map(id, wanted), found))
    return tuple(None if x is None else by_leaf.get(id(x)) for x in leaves)


def _single_kernel(op: Op, inputs, backend: Optional[str]) -> Optional[Kernel]:
    """The kernel the default ``run`` launches for these inputs, or None (own run, not a kernel)."""
    if type(op).run is not Op.run:
        return None
    specs = [None if x is None else TensorSpec(tuple(x.shape), tensors.dsl_dtype(x, describe(op)))
             for x in inputs]
    impl = op.implementation(specs, backend or _default_backend())
    return impl if isinstance(impl, Kernel) else None


def _default_backend() -> str:
    from dsl import config
    return config.default_backend()


def _grad_of(kernel: Kernel) -> Kernel:
    dsl = importlib.import_module("dsl")
    grad = getattr(dsl, "grad", None)
    if grad is None:
        raise RuntimeError(f"kernel {kernel.__name__!r}: this opdsl has no dsl.grad to differentiate it; give the "
                           "op a backward(self, grad_outputs, inputs, outputs) hook")
    cached = kernel.__dict__.get("_opdsl_grad")
    if cached is None:
        cached = kernel.__dict__["_opdsl_grad"] = grad(kernel)
    return cached


def _from_kernel_grad(op: Op, impl: Kernel, backend, grads, inputs, outputs, needs):
    gk = _grad_of(impl)
    names = {p.name for p in gk.params}
    tensor_params = [p for p in impl.params if p.kind == "tensor"]
    present = [x for x in inputs if x is not None]
    args, extra, into = [], {}, {}
    for k, p in enumerate(tensor_params):
        grad_name = f"grad_{p.name}"
        if k < len(present):
            x = present[k].detach().contiguous()
            args.append(x)
            if grad_name in names:
                into[k] = extra[grad_name] = torch.zeros_like(x)
        else:
            j = k - len(present)
            args.append(torch.empty_like(outputs[j]))  # the replay writes the forward's outputs here
            if grad_name in names:
                g = grads[j]
                extra[grad_name] = (torch.zeros_like(outputs[j]) if g is None else g).detach().contiguous()
    gk(*args, **extra, **op.kernel_kwargs(impl, backend))
    grads_in, k = [], 0
    for x, need in zip(inputs, needs):
        if x is None:
            grads_in.append(None)
            continue
        grads_in.append(into.get(k) if need else None)
        k += 1
    return tuple(grads_in)
