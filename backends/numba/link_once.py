"""LLVM work once per entry point: code that is only linked into other code is not optimized or
turned into machine code on its own.

numba finalizes every code library it makes (LLVM's module optimization, then machine code)
before it can be linked into another one, and the library it is linked into optimizes
everything again.  An opdsl entry point is a chain of such libraries: ``thread`` (or the
regions and ``@dsl.func`` bodies), and for ``launch_parallel`` also numba's parfor gufunc and its
two wrappers.  Only the entry's own library is ever called, so all the others' optimization and
machine code was thrown away (a cold light_resnet50: ~12 of ~25 CPU s of LLVM).

``LinkOnceLibrary`` finalizes lazily: ``finalize()`` only links what it links, and the module
optimization and machine code happen when something needs them (a function pointer for a
Python call, serialization to the disk cache, inspection).  Linking into another library
needs neither, so the entry's library optimizes the whole chain once, as one module.

``compiling()`` scopes this to opdsl's own compiles: libraries numba makes in it are
``LinkOnceLibrary``; outside it numba is untouched.  Two more places ask for machine code too
early, and are answered without it:

- numba's lowering takes the address of each function's Python wrapper; a function compiled
  without one (``no_cpython_wrapper``) or a parfor gufunc (whose entry point numba never calls)
  gets address 0, as a function without a wrapper always did.
- the function's environment pointer is set in machine code that does not exist yet: it is kept
  and set when a library defining that global gets its machine code.

A library still link-only when the disk cache wants it (``thread`` of a cached module) is saved as
its bitcode, which a later compile links without typing the function again.
"""
from __future__ import annotations

import ctypes
import threading
import weakref
from contextlib import contextmanager
from typing import Iterator

from llvmlite import binding as ll
from numba.core import codegen as numba_codegen
from numba.core.compiler_lock import global_compiler_lock, require_global_compiler_lock
from numba.core.registry import cpu_target

from backends.numba import typing_memo

GUFUNC_PREFIX = "__numba_parfor_gufunc"  # numba's parfor bodies: their entry point is never called

# environment global without machine code yet -> its Environment; weak, as numba's own set_env
# writes an address without holding the object (its function keeps it alive)
_pending_envs: "weakref.WeakValueDictionary[str, object]" = weakref.WeakValueDictionary()
_local = threading.local()


class LinkOnceLibrary(numba_codegen.JITCodeLibrary):
    """A JIT code library whose module optimization and machine code wait until they are needed."""

    _link_only = False  # finalize() has linked, nothing more

    def finalize(self):
        require_global_compiler_lock()
        self._codegen._check_llvm_bugs()
        self._raise_if_finalized()
        seen = set()
        for library in self._linking_libraries:
            if library not in seen:
                self._reload_init.update(library._reload_init)
                seen.add(library)
                self._final_module.link_in(library._get_module_for_linking(), preserve=True)
        self._finalize_dynamic_globals()
        self._finalized = True
        self._link_only = True

    def machine_code(self) -> None:
        """What numba's finalize() would have done after linking: optimize, then machine code."""
        if not self._link_only:
            return
        self._link_only = False
        self._dynamic_globals = []  # _finalize_final_module scans them again
        self._optimize_final_module()
        self._final_module.verify()
        self._finalize_final_module()
        _set_pending_envs(self)

    def get_pointer_to_function(self, name):
        self._ensure_finalized()
        if self._link_only and (self.name.startswith(GUFUNC_PREFIX) or not _defines(self._final_module, name)):
            return 0  # no such function (no Python wrapper) or one nobody calls: no machine code for it
        self.machine_code()
        return super().get_pointer_to_function(name)

    def get_llvm_str(self):
        self._ensure_finalized()
        self.machine_code()
        return super().get_llvm_str()

    def get_asm_str(self):
        self._ensure_finalized()
        self.machine_code()
        return super().get_asm_str()

    def get_function_cfg(self, name, py_func=None, **kwargs):
        self._ensure_finalized()
        self.machine_code()
        return super().get_function_cfg(name, py_func, **kwargs)

    def serialize_using_bitcode(self):
        self._ensure_finalized()
        self.machine_code()
        return super().serialize_using_bitcode()

    def serialize_using_object_code(self):
        """Machine code when there is some; a link-only library is saved as its bitcode (to link)."""
        self._ensure_finalized()
        if self._link_only:
            return (self.name, "bitcode", self._final_module.as_bitcode())
        return super().serialize_using_object_code()

    @classmethod
    def _unserialize(cls, codegen, state):
        name, kind, data = state
        if kind != "bitcode":
            return super()._unserialize(codegen, state)
        self = codegen.create_library(name)
        self._final_module = ll.parse_bitcode(data)
        self._finalize_dynamic_globals()
        self._finalized = True
        self._link_only = True
        return self


def machine_code_now(library) -> None:
    """Give ``library`` its machine code now if it waits for it (a library that is called or saved
    directly, such as NRT's, rather than linked into an entry)."""
    if isinstance(library, LinkOnceLibrary):
        library.machine_code()


def _defines(module, name: str) -> bool:
    try:
        return not module.get_function(name).is_declaration
    except NameError:
        return False


def _set_pending_envs(library: LinkOnceLibrary) -> None:
    """Point the environment globals this library's machine code defines at their Environment."""
    if not _pending_envs:
        return
    engine = library._codegen._engine
    for gv in library._final_module.global_variables:
        env = _pending_envs.get(gv.name)
        if env is not None and not gv.is_declaration and engine.is_symbol_defined(gv.name):
            _write_env(engine, gv.name, _pending_envs.pop(gv.name))


def _write_env(engine, env_name: str, env) -> None:
    address = engine.get_global_value_address(env_name)
    if address:
        (ctypes.c_void_p * 1).from_address(address)[0] = ctypes.c_void_p(id(env))


def _set_env(self, env_name, env):
    """numba's ``set_env`` for a global that may have no machine code yet (kept until it has)."""
    if self._engine.is_symbol_defined(env_name):
        _write_env(self._engine, env_name, env)
    else:
        _pending_envs[env_name] = env


@contextmanager
def compiling() -> Iterator[None]:
    """numba compiles inside this block make ``LinkOnceLibrary`` libraries and type each call once
    (backends/numba/typing_memo.py); nested blocks are one."""
    with global_compiler_lock:
        depth = getattr(_local, "depth", 0)
        codegen = cpu_target.target_context.codegen()
        if depth == 0:
            codegen._library_class = LinkOnceLibrary
            codegen.set_env = _set_env.__get__(codegen)
        _local.depth = depth + 1
        try:
            with typing_memo.memoized():  # each (function, argument types) typed once (typing_memo.py)
                yield
        finally:
            _local.depth = depth
            if depth == 0:
                del codegen._library_class  # back to the class attribute (JITCodeLibrary)
                del codegen.set_env
