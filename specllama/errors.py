"""The one exception a user's own input can cause."""


class SpecLlamaError(ValueError):
    """Bad input (a file, a flag, a prompt): the message names the bad value and
    what would be accepted, in one line, fit to show a user as it is."""


class SpecLlamaWarning(UserWarning):
    """A setting that works but probably not as meant (``--rpc`` with
    ``-ngl 0``, ...); the CLI shows it as one ``Warning: ...`` line."""
