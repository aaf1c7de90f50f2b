"""numba's compile pipeline for the functions a generated module calls only from compiled code.

Those functions (``thread``, regions, ``@dsl.func`` bodies, ``dispatch``) are the bulk of every
cold compile, and numba's front end, not LLVM, was most of their time (conv_pointwise's
``thread``, numba's own pass timers: SSA reconstruction 21 %, closure inlining 16 % of the
function's pipeline).  The generated code needs neither pass:

- SSA reconstruction lets one variable hold values of different types.  The code generator
  gives every value its IR type explicitly (``np.float32(...)``, ``np.int32(...)``), so each
  variable already has one type and typing without SSA gives the same types; LLVM's mem2reg
  builds the SSA form from numba's per-variable slots as it does for any alloca.
- Closure inlining (and its array-comprehension rewriting) has nothing to act on: generated
  code defines no closures, lambdas or comprehensions.

So ``Lean`` is numba's nopython pipeline without ``ReconstructSSA``, the phi stripping only SSA
needs, and ``InlineClosureLikes``; every other pass (typing, rewrites, lowering) is numba's own.
Entry points keep numba's default pipeline (``launch_parallel``'s parfor passes want SSA).
"""
from __future__ import annotations

from numba.core import compiler
from numba.core.compiler_machinery import PassManager
from numba.core.typed_passes import PreLowerStripPhis
from numba.core.untyped_passes import InlineClosureLikes, ReconstructSSA

SKIPPED = (ReconstructSSA, PreLowerStripPhis, InlineClosureLikes)


class Lean(compiler.CompilerBase):
    """numba's nopython pipeline minus the passes generated code does not need (SKIPPED)."""

    def define_pipelines(self):
        self.state.flags.enable_ssa = False
        full = compiler.DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm = PassManager("opdsl_lean")
        pm.passes.extend((p, d) for p, d in full.passes if p not in SKIPPED)
        pm.finalize()
        return [pm]
