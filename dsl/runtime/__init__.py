"""Kernel objects and launch: ``@dsl.kernel`` / ``@dsl.func`` (kernel.py) compile a Python
function through the language layer and a backend; fastpath.py generates the per-kernel
launch path for argument types already seen; autotune.py picks the fastest of several
``dsl.const`` settings (``@dsl.autotune``) and tuning_cache.py keeps its winners on disk.
"""
