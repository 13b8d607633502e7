"""The one error type the lab raises for anything an operator can fix."""


class LabError(Exception):
    """A problem with the lab or the way it was asked for; the message says what to do."""
