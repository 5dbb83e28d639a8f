"""``python -m attndyn`` and the ``attndyn`` script (:func:`main`): the same command line.

Ctrl-C or SIGTERM at any moment gives one line and exit status 130: :func:`main` sets its handlers
before anything else is imported (the command line's modules, then torch inside a command), and
:func:`attndyn.app.cli.entry` swaps them for the interruption path that keeps what has finished.
"""

import _signal  # the interpreter's own (already loaded): the handlers are set before any module is imported
import os
import sys

INTERRUPTED = "interrupted: nothing more was written (what had finished is kept)\n"


def _interrupted_early(signum, frame):  # before the entry point's own handling is in place
    os.write(2, INTERRUPTED.encode())
    os._exit(130)


def main() -> int:
    """Set the signal handlers, then import and run the command line; returns the exit status."""
    _signal.signal(_signal.SIGINT, _interrupted_early)
    _signal.signal(_signal.SIGTERM, _interrupted_early)
    from attndyn.app.cli import entry

    code = entry()
    if code == 130:
        # A Ctrl-C that lands in code a C extension runs through PyRun_* (torch's import does) sets
        # CPython's "unhandled KeyboardInterrupt" flag even though attndyn caught it, and the interpreter
        # would then end the process by SIGINT (status -2) instead of 130: run the exit handlers, flush,
        # and end here with the status said.
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(130)
    return code


if __name__ == "__main__":  # not when a spawned process (the figure worker) imports the parent's main module
    sys.exit(main())
