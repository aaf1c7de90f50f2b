"""Op packages: a folder with ``opdsl-package.yaml`` declaring custom ops (docs/packages.md).

``register_package(path)`` validates a package and registers its ops; ``check_package(path)``
validates and builds them without registering.  Every problem is a ``PackageError`` whose
message starts ``<manifest>:<line>: <key>: ``.
"""
from dsl.package.errors import PackageError
from dsl.package.manifest import FORMAT_VERSION
from dsl.package.op import PACKAGE_HOOKS, PackageOp
from dsl.package.package import MANIFEST, Package, check_package, register_package
from dsl.package.carry import carried_class

# Pickling a package op carries its package's files (carry.py); dsl/runtime/pickling.py asks the
# class for this stand-in, so the op layer never imports the package layer.
PackageOp._opdsl_portable_class = classmethod(carried_class)

__all__ = ["FORMAT_VERSION", "MANIFEST", "PACKAGE_HOOKS", "Package", "PackageError", "PackageOp",
           "check_package", "register_package"]
