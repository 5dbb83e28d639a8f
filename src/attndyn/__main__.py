"""``python -m attndyn``: the same command line as the ``attndyn`` script."""

import sys

from attndyn.app.cli import entry

sys.exit(entry())
