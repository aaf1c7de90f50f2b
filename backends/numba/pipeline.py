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

numba's two rewrite passes (constant getitems, static binops, print calls before typing; array
expressions and constant arrays after it) recompute the whole function's liveness after running,
whether a rewrite applied or not (the after-typing pass twice, with ``del`` statements put in and
taken out again): ~1 s of conv_pointwise's ``thread``, where only constant tuple indexes match.
``Lean`` asks the rewrites first (their ``match``, which changes nothing) and runs numba's pass only
when one matches, or, when the only matches swap an expression for its static form in place
(IN_PLACE), applies those without the liveness pass; liveness is computed again from the final
blocks before lowering (``IRLegalization``) in every case.
"""
from __future__ import annotations

from typing import List

from numba.core import compiler
from numba.core.compiler_machinery import FunctionPass, PassManager, register_pass
from numba.core.rewrites import rewrite_registry
from numba.core.typed_passes import NopythonRewrites, PreLowerStripPhis
from numba.core.untyped_passes import GenericRewrites, InlineClosureLikes, ReconstructSSA

SKIPPED = (ReconstructSSA, PreLowerStripPhis, InlineClosureLikes)


# Before-typing rewrites that only swap an expression for its static form in place (same variables
# read, same blocks): after them the liveness numba computed before is still right.  Generated code
# reaches the first one whenever it indexes the tile-count tuple (``_ntiles[k]``).
IN_PLACE = ("RewriteConstGetitems", "RewriteConstSetitems", "DetectStaticBinops")


def matching_rewrites(kind: str, state) -> List[type]:
    """numba's ``kind`` rewrites that match some block of the function (asking changes nothing)."""
    found = []
    for rewrite_class in rewrite_registry.rewrites[kind]:
        rewrite = rewrite_class(state)
        if any(rewrite.match(state.func_ir, block, state.typemap, state.calltypes)
               for block in state.func_ir.blocks.values()):
            found.append(rewrite_class)
    return found


def apply_in_place(rewrite_classes: List[type], state) -> None:
    """Apply each rewrite to every block until it no longer matches, as numba's registry does, without
    the liveness pass the registry runs after (the rewrites are IN_PLACE ones)."""
    blocks = state.func_ir.blocks
    for rewrite_class in rewrite_classes:
        rewrite = rewrite_class(state)
        pending = list(blocks.items())
        while pending:
            label, block = pending.pop()
            if rewrite.match(state.func_ir, block, state.typemap, state.calltypes):
                blocks[label] = rewrite.apply()
                blocks[label].verify()
                pending.append((label, blocks[label]))


@register_pass(mutates_CFG=True, analysis_only=False)
class GenericRewritesWhenMatched(FunctionPass):
    """numba's ``GenericRewrites`` (before typing) when a rewrite matches; in place when all are IN_PLACE."""

    _name = "opdsl_generic_rewrites"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        found = matching_rewrites("before-inference", state)
        if not found:
            return False
        if all(c.__name__ in IN_PLACE for c in found):
            apply_in_place(found, state)
            return True
        return GenericRewrites().run_pass(state)


@register_pass(mutates_CFG=True, analysis_only=False)
class NopythonRewritesWhenMatched(FunctionPass):
    """numba's ``NopythonRewrites`` (after typing), run only when one of its rewrites matches."""

    _name = "opdsl_nopython_rewrites"

    def __init__(self):
        FunctionPass.__init__(self)

    def run_pass(self, state):
        return bool(matching_rewrites("after-inference", state)) and NopythonRewrites().run_pass(state)


REPLACED = {GenericRewrites: GenericRewritesWhenMatched, NopythonRewrites: NopythonRewritesWhenMatched}


class Lean(compiler.CompilerBase):
    """numba's nopython pipeline minus the passes generated code does not need (SKIPPED), its
    rewrite passes run only when a rewrite matches (REPLACED)."""

    def define_pipelines(self):
        self.state.flags.enable_ssa = False
        full = compiler.DefaultPassBuilder.define_nopython_pipeline(self.state)
        pm = PassManager("opdsl_lean")
        pm.passes.extend((REPLACED.get(p, p), d) for p, d in full.passes if p not in SKIPPED)
        pm.finalize()
        return [pm]
