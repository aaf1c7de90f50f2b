"""``python -m dsl.cli``: the ``opdsl`` command without the installed script."""
import sys

from dsl.cli.main import main

sys.exit(main())
