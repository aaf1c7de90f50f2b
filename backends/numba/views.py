"""Array views for generated numba code that numba would otherwise build by compiling a helper.

An entry point flattens each n-d tensor once per launch.  ``a.reshape(a.size)`` does that, but
numba lowers ``reshape`` by compiling its ``_attempt_nocopy_reshape`` helper as a function of its
own (~0.3 s of CPU per process and rank, paid by every cold first call of a 2-d+ kernel and by
every compile worker).  The tensors an entry point receives are C-contiguous (the launcher and
the entry signatures guarantee it), so the flat view is just the same data pointer, one dimension
of ``size`` elements and a stride of one item: ``flat`` builds that array structure directly.
"""
from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array


@intrinsic
def flat(typingctx, arr):
    """The 1-d view of a C-contiguous array (``arr.reshape(arr.size)`` without numba's helper)."""
    if not isinstance(arr, types.Array) or arr.layout != "C":
        return None
    out = arr.copy(ndim=1, layout="C")

    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, value=args[0])
        dst = make_array(sig.return_type)(context, builder)
        populate_array(dst, data=src.data, shape=cgutils.pack_array(builder, [src.nitems]),
                       strides=cgutils.pack_array(builder, [src.itemsize]), itemsize=src.itemsize,
                       meminfo=src.meminfo, parent=src.parent)
        return impl_ret_borrowed(context, builder, sig.return_type, dst._getvalue())
    return out(arr), codegen
