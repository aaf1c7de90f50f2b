"""``@dsl.func`` specializations in C-family code: signatures, bodies and calls.

A tensor parameter is a pointer in its address space: a kernel tensor's (``__global`` on
OpenCL) followed by its shape, one ``long`` per axis, as the kernel itself takes it; team
scratch a ``__local`` one, its shape known at compile time.  Inside the body, tensor code is the
kernel's (backends/func_view.py); in debug mode a function taking tensors also takes the error
record its bounds checks write.  Mixed into CStyleRenderer (``k``, ``names``, ``shape_names``,
``size_names``, ``emit``, ``block``, ...)."""
from __future__ import annotations

from dsl.lang import ir
from backends.func_view import FuncView


class CFunctions:
    """``_function`` emits one specialization, ``_func_signature`` its prototype line,
    ``visit_FuncCall`` a call."""

    def _func_signature(self, f: ir.Function) -> str:
        """A tensor parameter is a pointer in its address space (a kernel tensor's followed by
        its shape, as the kernel itself takes it; scratch ``__local``, its shape compile-time)."""
        ret = self.ctype(f.ret.compute) if f.ret is not None else "void"
        ps = []
        for p in f.params:
            cname = self.names.user(p.name)
            if isinstance(p, ir.TensorParam):
                const = "const " if p.access == "in" else ""
                ps.append(f"{self.buffer_prefix}{const}{self.stype(p.dtype)}* {cname}")
                ps += [f"{self.size_type} {s}" for s in self.func_shapes[f.name, p.name]]
            elif isinstance(p, ir.Scratch):
                ps.append(f"{self.local_prefix}{self.scratch_storage.get(p.dtype.name, self.stype(p.dtype))}* {cname}")
            else:
                ps.append(f"{self.ctype(p.dtype.compute)} {cname}")
        if f.name in self.record_funcs:
            ps.append(f"{self.buffer_prefix}long* {self.err_name}")
        if self.gated:  # its dsl.log calls (or its callees') read the run-time threshold
            ps.append(f"long {self.log_name}")
        return f"{self.func_prefix}{ret} {self.fnames[f.name]}({', '.join(ps) or 'void'})"

    def _function(self, f: ir.Function) -> None:
        for p in f.params:
            self.names.user(p.name)
            self._note_type(p.dtype)
            if isinstance(p, ir.TensorParam):
                self.func_shapes[f.name, p.name] = [self.names.fresh(f"{self.names.user(p.name)}_shape{d}")
                                                    for d in range(p.ndim)]
        for name, _ in f.locals:
            self.names.user(name)
        kernel_view = self.k, self.shape_names, self.size_names
        self.k = FuncView(self.k, f)  # tensor accesses in the body address the parameters
        self.shape_names = {p.name: self.func_shapes[f.name, p.name] for p in f.params
                            if isinstance(p, ir.TensorParam)}
        self.size_names = {n: self.names.fresh(f"{self.names.user(n)}_size") for n in self.shape_names}
        try:
            self.emit(self._func_signature(f))
            self.emit("{")
            self.depth += 1
            used_sizes = {n.tensor for n in ir.walk(list(f.body)) if isinstance(n, ir.Size)}
            for name, dims in self.shape_names.items():
                if name in used_sizes:
                    self.emit(f"const {self.size_type} {self.size_names[name]} = {' * '.join(dims) or '1'};")
            self._declare_locals(f.locals)
            self.func_ret = f.ret
            self.in_func = True  # no hidden arguments here: loops in device functions are not polled
            self.block(f.body)
            self.in_func = False
            self.depth -= 1
            self.emit("}")
            self.emit("")
        finally:
            self.k, self.shape_names, self.size_names = kernel_view

    def visit_FuncCall(self, e: ir.FuncCall) -> str:
        args = []
        for a in e.args:
            if not isinstance(a, ir.TensorRef):
                args.append(self.bare(a))
                continue
            args.append(self.names.user(a.tensor))  # the pointer, then a kernel tensor's shape
            if isinstance(self.k.buffer(a.tensor), ir.TensorParam):
                args += self.shape_names[a.tensor]
        if e.func in self.record_funcs:
            args.append(self.err_name)
        if self.gated:
            args.append(self.log_name)
        return f"{self.fnames[e.func]}({', '.join(args)})"
