"""`python3 -m zerocheck_ds`: the command line (see runner.py)."""

import sys

from .runner import main

sys.exit(main())
