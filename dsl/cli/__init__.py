"""The ``opdsl`` command (main.py) and the built-in demo it runs (demo.py)."""
