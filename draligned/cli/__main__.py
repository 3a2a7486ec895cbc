"""`python -m draligned.cli` runs the command line."""

import sys

from draligned.cli import main

sys.exit(main())
