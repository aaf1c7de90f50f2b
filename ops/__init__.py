"""The built-in operator library, written in the DSL, one family per module (ops/library.py lists
them).  Nothing is imported with the package: the op registry imports a family when a model or a
lookup names one of its ops (ops/library_index.py), or all of them when a question needs the whole
table.  ``ops.<Name>`` (``ops.MatMul``, ``ops.Relu``) loads the library and returns that op;
``ops.<module>`` is the submodule."""
import importlib
import importlib.util


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a submodule: only that one
        return importlib.import_module(f"{__name__}.{name}")
    from dsl.opgraph import registry
    registry.load_builtin_library()
    library = importlib.import_module(f"{__name__}.library")
    try:
        return getattr(library, name)
    except AttributeError:
        raise AttributeError(f"module 'ops' has no attribute {name!r}: neither an op of the built-in library "
                             "(ops/library.py) nor a module of it") from None
