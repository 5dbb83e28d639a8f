"""The ``attndyn`` commands, one module per group; :mod:`attndyn.app.cli` registers them on the app."""
