"""A claim module whose figures fail, for the figure worker's test (imported by name in the worker)."""


def figures(result):
    raise ValueError("no figure for this result (a deliberate failure)")
