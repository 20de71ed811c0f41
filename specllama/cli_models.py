"""``specllama models``: the curated pairs, or (``--local``) every GGUF model on
this machine. Light: it loads no model, and neither llama.cpp nor numpy."""

from __future__ import annotations

import click

from .cli_errors import boundary


@click.command()
@click.option("--local", is_flag=True,
              help="List every GGUF model on this machine (Ollama, LM Studio, the Hugging Face cache, specllama's "
                   "cache folder, --dir), grouped by tokenizer, with the pairs that could draft.")
@click.option("--dir", "dirs", multiple=True, type=click.Path(), metavar="FOLDER",
              help="Also look in this folder, recursively (repeatable; implies --local).")
@boundary
def models(local, dirs) -> None:
    """List the curated draft/target pairs and which files are downloaded (--local: every GGUF model here)."""
    if local or dirs:
        from .local_models import format_scan, scan

        found = scan(dirs)
        click.echo(format_scan(found))
        for line in found.problems:
            click.echo(f"skipped: {line}", err=True)
        return
    from .pairs import cached_path, curated_pairs

    for pair in curated_pairs().values():
        click.echo(pair.name)
        for f in (pair.target, pair.draft):
            path = cached_path(f)
            state = f"downloaded: {path}" if path else "not downloaded"
            click.echo(f"  {f.role:<6}  {f.repo}/{f.filename}  ({f.size}; {state})")
    click.echo("Download a pair with: specllama pull NAME; then use -m NAME -md NAME or --pair NAME.")
