"""The one exception a user's own input can cause."""


class SpecLlamaError(ValueError):
    """Bad input (a file, a flag, a prompt): the message names the bad value and
    what would be accepted, in one line, fit to show a user as it is."""
