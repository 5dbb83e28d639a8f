"""``python -m attndyn``: the same command line as the ``attndyn`` script."""

import sys

from attndyn.app.cli import entry

if __name__ == "__main__":  # not when a spawned process (the figure worker) imports the parent's main module
    sys.exit(entry())
