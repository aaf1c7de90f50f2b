"""The C-family emitter (emitter.py), its C helper functions (helpers.py) and the debug and
Ctrl-C instrumentation (instrument.py) that an OpenCL, C or CUDA target subclasses."""
