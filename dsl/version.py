"""opdsl's version: part of every compile-cache key, and ``dsl.__version__``."""
__version__ = "0.1.0"
