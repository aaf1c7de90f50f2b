"""Instrumentation of generated C-family kernels: debug-mode bounds checks and Ctrl-C polls.

Both reach the kernel as hidden trailing arguments (the SIGINT counter and its value at
launch, backends/interrupt.py; the per-launch error record, backends/bounds.py), so with
both off the generated code is exactly what it was.  Mixed into CStyleRenderer, whose
state (``k``, ``debug``, ``interrupt``, ``in_func``, ``sites``, ``emit``) and hooks
(``sync``, ``claim``, ``read_claim``) it uses.
"""
from __future__ import annotations

from typing import List

import numpy as np

from dsl.lang import ir
from dsl.lang.errors import UNKNOWN
from backends import bounds
from backends.bounds import INDEX, MAX_RANK, SHAPE
from backends.spelling import row_major


class CInstrumentation:
    intr_name, intr0_name, err_name = "opdsl_intr", "opdsl_intr0", "opdsl_err"
    log_name = "opdsl_loglvl"  # the run-time dsl.log threshold (backends/log_gate.py)
    gated = False              # set per kernel by render(): it has levelled dsl.log calls

    def hidden_params(self) -> List[str]:
        """The hidden trailing parameters: the Ctrl-C counter and its value at launch, the error
        record, the run-time log threshold."""
        out = []
        if self.interrupt:
            out += [f"{self.buffer_prefix}volatile const long* {self.intr_name}", f"long {self.intr0_name}"]
        if self.record:
            out.append(f"{self.buffer_prefix}long* {self.err_name}")
        if self.gated:
            out.append(f"long {self.log_name}")
        return out

    def stop_condition(self) -> str:
        """C true when a loop should stop: Ctrl-C, or (debug) a failed bounds check."""
        conds = [f"*{self.intr_name} != {self.intr0_name}"] if self.interrupt and not self.in_func else []
        if self.debug and not self.in_func:
            conds.append(f"{self.read_claim(self.err_name)} != 0")
        return " || ".join(conds)

    def poll(self, loop_body) -> None:
        """``break`` out of the loop when stop_condition holds.

        ``break``, not ``return``: a work-item that left the kernel while the others wait at a
        later sync is undefined behaviour; every loop it is still in polls and breaks too.
        A loop with sync() inside is left by the whole team at once: thread 0 reads the flag
        into scratch memory, a sync, then everyone reads the same slot.  Two slots used in
        turn keep this free of races without a second barrier (a slot is written again only
        after the next poll's sync, which every reader of it has passed)."""
        cond = self.stop_condition()
        if not cond:
            return
        why = "Ctrl-C" + (" or a failed bounds check" if self.debug else "")
        if not ir.contains_sync(list(loop_body)):
            self.emit(f"if ({cond}) break;  // {why}")
            return
        self.emit(f"if ({self.code_for_team['thread_id']} == 0) opdsl_stop[opdsl_turn] = ({cond});  // {why}, "
                  "decided for the whole team")
        self.emit(self.sync())
        self.emit("if (opdsl_stop[opdsl_turn]) break;")
        self.emit("opdsl_turn ^= 1;")

    def team_poll_state(self) -> List[str]:
        """Declarations the team-wide polls of loops with sync() need (kernel scope)."""
        if not self.stop_condition() or not any(isinstance(n, (ir.For, ir.While)) and ir.contains_sync(list(n.body))
                                                for n in ir.walk(list(self.k.body))):
            return []
        return [f"{self.local_prefix}int opdsl_stop[2];  // team-wide Ctrl-C decisions, used in turn",
                "int opdsl_turn = 0;"]

    def refuse_if(self, cond: str, value: str, what: str, loc) -> None:
        """Always on, where an argument is known at run time only: when ``cond`` holds, record
        ``value`` as refused (the launch raises KernelValueError, backends/bounds.py)."""
        site = bounds.value_site(self.sites, what, loc if loc is not UNKNOWN and loc.line > 0 else self.cur_loc,
                                 getattr(self.k, "func_name", ""))
        self.emit(f"if ({cond}) {self.helper('refuse')}({self.err_name}, {site}L, {value});  // {what}")

    def helper_refuse(self, name, t, dtype, extra):
        return (f"{self.func_prefix}void {name}({self.buffer_prefix}long* err, long site, long value) {{\n"
                f"  // a refused run-time argument (range step 0, dsl.split align < 1): the launch's first is kept\n"
                f"  if ({self.claim('err')} == 0) {{\n"
                f"    err[1] = site; err[2] = -1; err[3] = {self.code_for_team['thread_id']}; "
                f"err[4] = {self.code_for_team['flat_tile_id']}; err[{INDEX}] = value;\n"
                f"  }}\n}}")

    def checked_offset(self, node, kind: str) -> str:
        """Debug mode: the offset of ``node``'s index, or -1 after recording a failure (helper at_<rank>)."""
        buf = self.k.buffer(node.tensor)
        if node.flat:
            dims = [self.size_name(node.tensor)]
        elif isinstance(buf, ir.TensorParam):
            dims = self.shape_names[node.tensor]
        elif isinstance(buf, ir.VecParam):
            dims = [str(buf.length)]
        else:
            dims = [f"{n}L" for n in buf.shape]
        loc = node.loc if node.loc is not UNKNOWN and node.loc.line > 0 else self.cur_loc
        site = self.sites.add(node.tensor, kind, node.flat, len(node.index), loc, getattr(self.k, "func_name", ""))
        pairs = ", ".join(f"(long)({self.bare(i)}), {n}" for i, n in zip(node.index, dims))
        return f"{self.helper('at', None, str(len(node.index)))}({self.err_name}, {site}L, {pairs})"

    def checked_load(self, e: ir.Load, buf, ptr: str) -> str:
        """Debug mode: the element, or 0 when its index failed the check (recorded; the launch raises).
        A helper reads it, so the checked offset is computed once."""
        if self.vec_is_buffer(buf):  # its elements are the scalar argument type, in the buffer space
            read = self.helper("ld", None, f"tensor_{self.arg_type(buf.dtype)}")
            return f"{read}({ptr}, {self.checked_offset(e, 'load')})"
        space = ("scratch" if isinstance(buf, ir.Scratch) else "tensor" if isinstance(buf, ir.TensorParam)
                 else "private")
        name = buf.dtype.name
        private = space == "private"
        elem = self.ctype(buf.dtype.compute) if private else "half" if name == "f16" else self.stype(buf.dtype)
        read = self.helper("ld", None, f"{space}_{elem}")
        value = f"{read}({ptr}, {self.checked_offset(e, 'load')})"
        if private:
            return value
        if name == "bf16":
            return f"{self.helper('bf16_to_f32')}({value})"
        if name == "bool_":
            return f"({value} != 0)"
        return value

    def helper_ld(self, name, t, dtype, extra):
        space, elem = extra.split("_", 1)
        qual = {"tensor": self.buffer_prefix, "scratch": self.local_prefix, "private": ""}[space]
        if elem == "half":  # f16 storage: converted to float as it is read
            return (f"{self.func_prefix}float {name}({qual}const half* p, long o) {{\n"
                    f"  // debug mode: o < 0 is an index that failed its check (recorded); it reads as 0\n"
                    f"  return o < 0 ? 0.0f : {self.load_f16('p', 'o')};\n}}")
        return (f"{self.func_prefix}{elem} {name}({qual}const {elem}* p, long o) {{\n"
                f"  // debug mode: o < 0 is an index that failed its check (recorded); it reads as 0\n"
                f"  return o < 0 ? ({elem})0 : p[o];\n}}")

    def size_name(self, tensor: str) -> str:
        buf = self.k.buffer(tensor)
        if isinstance(buf, ir.TensorParam):
            return f"({' * '.join(self.shape_names[tensor]) or '1L'})"
        if isinstance(buf, ir.VecParam):
            return f"{buf.length}L"
        return f"{int(np.prod(buf.shape)) if buf.shape else 1}L"

    def helper_at(self, name, t, dtype, extra):
        rank = int(extra)
        params = ", ".join(f"long i{d}, long n{d}" for d in range(rank))
        off = row_major([f"i{d}" for d in range(rank)], [f"n{d}" for d in range(rank)])
        checks = "".join(f"  if (i{d} < 0 || i{d} >= n{d}) axis = {d};\n" for d in reversed(range(rank)))
        keep = "".join(f" err[{INDEX + d}] = i{d}; err[{SHAPE + d}] = n{d};" for d in range(min(rank, MAX_RANK)))
        return (f"{self.func_prefix}long {name}({self.buffer_prefix}long* err, long site, {params}) {{\n"
                f"  // debug mode: the row-major offset, or -1 after the launch's first failure is recorded\n"
                f"  long axis = -1;\n{checks}"
                f"  if (axis < 0) return {off};\n"
                f"  if ({self.claim('err')} == 0) {{\n"
                f"    err[1] = site; err[2] = axis; err[3] = {self.code_for_team['thread_id']}; "
                f"err[4] = {self.code_for_team['flat_tile_id']};{keep}\n"
                f"  }}\n  return -1;\n}}")

    def claim(self, record: str) -> str:
        """C returning 0 for the first caller only (a compare-and-swap on the record's first slot)."""
        return f"{record}[0]++"

    def read_claim(self, record: str) -> str:
        """C reading the slot ``claim`` writes (atomically where claim is atomic: no data race)."""
        return f"{record}[0]"
