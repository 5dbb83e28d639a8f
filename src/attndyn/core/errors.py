"""The one base class of the errors a user's input causes.

Contract
--------
:class:`UserError` (a ``ValueError``) is raised for what the user gave: a bad config value, an
unreadable or inconsistent file, a folder attndyn may not write into. Its message is one readable
sentence naming the value or path. The command line turns it into that line on stderr and exit
status 2; anything else is a bug (exit 1). Every layer's own errors derive from it
(``ConfigError``, ``SweepError``, ``RunFolderError``, ``OwnershipError``, ``CheckpointError``,
``JudgeError``, ``ReportError``).
"""


class UserError(ValueError):
    """An error in the user's input; the message is one line naming the value or path."""
