"""Identifiers in generated code, for every emitter: the reserved words of each target language
and the one way user names are kept or renamed.

A user's name is kept when it cannot clash (so generated code reads like the kernel) and renamed
the same way every time when it can: a target keyword or library name, a name the emitter owns
(a prefix or pattern it generates itself), or a name already taken.  Generated names come from
``fresh`` and never collide with user names.
"""
from __future__ import annotations

import keyword
import re
from typing import Callable, Dict, Iterable, Optional, Pattern, Sequence, Set

# C keywords, the usual typedef names, and the C library math the C-family emitter calls.
C_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
_Bool _Complex _Imaginary bool true false uchar ushort uint ulong half size_t ptrdiff_t intptr_t uintptr_t
main NULL exp log sqrt tanh erf sin cos floor ceil rint tan asin acos atan sinh cosh asinh acosh atanh
expm1 log1p erfc fabs abs min max fmin fmax pow fmod copysign isnan isinf
INFINITY NAN
""".split())

# OpenCL C's address spaces, image types and the builtins its backend emits.
OPENCL_RESERVED = frozenset("""
kernel global local constant private read_only write_only read_write image2d_t image3d_t sampler_t event_t
printf barrier rsqrt clamp pown vload_half vstore_half vstore_half_rte atomic_add atom_add
atomic_cmpxchg atom_cmpxchg as_float as_uint as_double as_ulong select mix sign
get_local_id get_group_id get_global_id get_local_size get_num_groups get_global_size
""".split()) | frozenset(  # OpenCL C 1.2's other built-in functions: a kernel or function of the same
    # name would be an overload of the built-in (PoCL renames such a kernel, and the launch no longer finds it)
    """
acos acosh acospi asin asinh asinpi atan atan2 atanh atanpi atan2pi cbrt ceil copysign cos cosh cospi
erfc erf exp exp2 exp10 expm1 fabs fdim floor fma fmax fmin fmod fract frexp hypot ilogb ldexp lgamma
lgamma_r log log2 log10 log1p logb mad maxmag minmag modf nan nextafter pow pown powr remainder remquo
rint rootn round rsqrt sin sincos sinh sinpi sqrt tan tanh tanpi tgamma trunc
half_cos half_divide half_exp half_exp2 half_exp10 half_log half_log2 half_log10 half_powr half_recip
half_rsqrt half_sin half_sqrt half_tan native_cos native_divide native_exp native_exp2 native_exp10
native_log native_log2 native_log10 native_powr native_recip native_rsqrt native_sin native_sqrt native_tan
abs abs_diff add_sat hadd rhadd clz ctz mad_hi mad_sat mul_hi rotate sub_sat upsample popcount mad24 mul24
degrees radians step smoothstep cross dot distance length normalize fast_distance fast_length fast_normalize
isequal isnotequal isgreater isgreaterequal isless islessequal islessgreater isfinite isinf isnormal
isordered isunordered signbit any all bitselect shuffle shuffle2 vec_step
mem_fence read_mem_fence write_mem_fence async_work_group_copy async_work_group_strided_copy
wait_group_events prefetch get_work_dim get_global_offset
atomic_sub atomic_xchg atomic_inc atomic_dec atomic_min atomic_max atomic_and atomic_or atomic_xor
read_imagef read_imagei read_imageui write_imagef write_imagei write_imageui get_image_width
get_image_height get_image_depth get_image_channel_data_type get_image_channel_order get_image_dim
""".split())
OPENCL_VECTOR_TYPES = re.compile(r"^(char|uchar|short|ushort|int|uint|long|ulong|float|double|half)(2|3|4|8|16)$")

# The Python builtins generated numba code calls; Python keywords are reserved too
# (``keyword.iskeyword``), and each generator adds the names its module binds (``PyNames(reserved=)``).
PYTHON_RESERVED = frozenset({
    "range", "min", "max", "abs", "print", "str", "chr", "len", "True", "False", "None", "int", "float", "bool"})


def ident(name: str, empty: str = "kernel") -> str:
    """``name`` with every character that cannot be in an identifier replaced by ``_``."""
    return re.sub(r"\W", "_", name) or empty


class CNames:
    """Stable C identifiers: user names kept unless reserved; generated names never collide.

    ``owned_prefixes`` are prefixes the target or emitter generates (its helpers, builtins);
    a user name starting with one gets a ``u`` in front.  A clash then appends ``_``."""

    def __init__(self, reserved: Iterable[str] = C_RESERVED, owned_prefixes: Sequence[str] = ("opdsl_", "__"),
                 pattern: Optional[Pattern] = None):
        self.reserved = set(reserved)
        self.owned_prefixes = tuple(owned_prefixes)
        self.pattern = pattern
        self.map: Dict[str, str] = {}
        self.taken: Set[str] = set()

    def _bad(self, name: str) -> bool:
        return (name in self.reserved or name in self.taken
                or bool(self.pattern is not None and self.pattern.match(name)))

    def _owned(self, name: str) -> bool:
        """Names the target or emitter generates: a prefix it owns, or its reserved pattern (which
        suffixes cannot leave: ``convert_kernel2`` still looks like an OpenCL conversion)."""
        return name.startswith(self.owned_prefixes) or bool(self.pattern is not None and self.pattern.match(name))

    def user(self, name: str) -> str:
        """The C spelling of user identifier ``name`` (same every time)."""
        if name not in self.map:
            c = "u" + name if self._owned(name) else name
            while self._bad(c):
                c = c + "_"
            self.map[name] = c
            self.taken.add(c)
        return self.map[name]

    def fresh(self, base: str) -> str:
        """A new generated identifier based on ``base``."""
        base = "u" + base if self._owned(base) else base
        c = base
        n = 1
        while self._bad(c) or c in self.map:
            n += 1
            c = f"{base}{n}"
        self.taken.add(c)
        return c


# Spellings the numba code generator uses for its own variables: a leading underscore, shape and
# size companions of a tensor, region and function names.
PYTHON_INTERNAL = re.compile(r"^_|_(shape\d+|size|nd)$|^(region|func)_\d*")


class PyNames:
    """User identifiers -> names in a generated Python module, never clashing with internals.

    A clashing name gets ``_u`` appended (``u`` prepended when it starts with ``_`` or names an
    internal prefix), then a counter until free."""

    def __init__(self, user: Sequence[str], internal: Callable[[str], bool] = PYTHON_INTERNAL.search,
                 reserved: Iterable[str] = ()):
        self.map: Dict[str, str] = {}
        taken: Set[str] = set(user)
        reserved = PYTHON_RESERVED | frozenset(reserved)
        for n in user:
            if n in self.map:
                continue
            if n in reserved or keyword.iskeyword(n) or internal(n):
                base = ("u" + n) if n.startswith("_") else n + "_u"
                if internal(base):  # a prefix the generator owns (``func_x`` -> ``ufunc_x_u``)
                    base = "u" + base
                cand, k = base, 1
                while cand in taken or cand in reserved or internal(cand):
                    k += 1
                    cand = f"{base}{k}"
                taken.add(cand)
                self.map[n] = cand
            else:
                self.map[n] = n

    def __getitem__(self, n: str) -> str:
        return self.map.get(n, n)
