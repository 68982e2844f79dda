"""``python -m hookviz ...``: the command line (``hookviz.cli``)."""

import sys

from .cli import main

sys.exit(main())
