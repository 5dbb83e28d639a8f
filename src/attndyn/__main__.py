"""``python -m attndyn``: the same command line as the ``attndyn`` script."""

from attndyn.app.cli import app

app(prog_name="attndyn")
