"""The project's own exceptions: library code raises these, and only the CLI maps them to exit code 2.

Every message is one line a user can act on, in the "path: key: what to change" form where a file is involved.
"""

from __future__ import annotations


class DoctorError(Exception):
    """Base of every error the doctor reports to a user (exit code 2 from the command line)."""


class UsageError(DoctorError):
    """A command-line value or combination is wrong: the message names the option and the valid values."""


class InputError(DoctorError):
    """An input (log, launch file, model config, rule pack) cannot be read or is not valid."""


class LimitError(InputError):
    """An input exceeds a safety bound (size, nesting, aliases, time): refused rather than hang or blow memory."""
