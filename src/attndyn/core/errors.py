"""The one base class of the errors a user's input causes.

Contract
--------
:class:`UserError` (a ``ValueError``) is raised for what the user gave: a bad config value, an
unreadable or inconsistent file, a folder attndyn may not write into. Its message is one readable
sentence naming the value or path. The command line turns it into that line on stderr and exit
status 2; anything else is a bug (exit 1). Every layer's own errors derive from it
(``ConfigError``, ``SweepError``, ``RunFolderError``, ``OwnershipError``, ``CheckpointError``,
``JudgeError``, ``ReportError``, and :class:`~attndyn.core.reading.FileRefused` for a file that is
not read: not a regular file, too large, nested too deep, or declaring more than it holds).

What is not a ``UserError`` but still the user's: ``EOFError`` from a file that ends early is a
damaged file (exit 2), never an interruption; only ``KeyboardInterrupt`` (Ctrl-C) and SIGTERM give
exit 130. Values are checked where they enter (the config schema, the readers), so that nothing
downstream (numpy's ``uniform`` with an infinite range, a solver's grid test) raises a plain
``ValueError`` or ``OverflowError`` that the command line would report as a bug.
"""


class UserError(ValueError):
    """An error in the user's input; the message is one line naming the value or path."""
