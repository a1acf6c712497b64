"""`python -m vitzoo ...` runs the `vitzoo` command."""

import sys

from .cli import main

sys.exit(main())
