"""Showing where each token came from: text coloured by origin, for the CLI
and the chat REPL (``--color auto|always|never``)."""

from __future__ import annotations

from typing import IO, Iterable

import click

from .generation import DRAFT, TARGET

COLOR_MODES = ("auto", "always", "never")
STYLES = {DRAFT: {"fg": "green"}, TARGET: {"fg": "yellow"}}
MEANINGS = {DRAFT: "drafted, accepted by the target", TARGET: "sampled by the target (after a rejection, or the bonus)"}


def color_enabled(mode: str, stream: IO) -> bool:
    """"always", "never", or "auto": colour only on a terminal."""
    if mode == "auto":
        return bool(getattr(stream, "isatty", lambda: False)())
    return mode == "always"


def styled(pieces: Iterable[tuple[str, str]]) -> str:
    """``(text, origin)`` pieces as one ANSI-coloured string."""
    return "".join(click.style(text, **STYLES[origin]) for text, origin in pieces if text)


def legend() -> str:
    """One line saying which colour is which."""
    return "  ".join(click.style(MEANINGS[o], **STYLES[o]) for o in (DRAFT, TARGET))
