"""The errors of reading a trained model, in a module of their own so that every reader imports them
without importing another reader (:mod:`~attndyn.models.bert` and :mod:`~attndyn.models.file_checks`
used to import each other for them). Both are :class:`~attndyn.core.errors.UserError` (exit 2)."""

from __future__ import annotations

from attndyn.core.errors import UserError


class CheckpointError(UserError):
    """A checkpoint that cannot be read; the message is one line."""


class ModelFileError(CheckpointError):
    """A model file whose content cannot be trusted; the message names the file and the field."""
