"""``python -m dtcomm``: the same as ``dtrun``."""

import sys

from .launcher.cli import main

sys.exit(main())
