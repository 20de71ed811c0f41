"""The docs cannot drift: every flag in docs/flags.md, every relative link alive.

The flags and their defaults are read from click's own parameters of
``specllama.cli.main`` at run time; docs/flags.md is written by hand, and
nothing here generates it. A row documents a flag when its first cell holds
the flag's spellings in backticks; its last cell holds the default in
backticks (booleans as `on`/`off`) unless the default is None.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from specllama.cli import main

ROOT = Path(__file__).resolve().parent.parent
FLAGS_MD = ROOT / "docs" / "flags.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
        ROOT / "benchmarks" / "RESULTS.md", ROOT / "benchmarks" / "history" / "details-2026-12.md"]

CODE = re.compile(r"`([^`]+)`")
UNSET = getattr(click.core, "UNSET", None)  # click >= 8.3: the default of a flag given none


def commands() -> dict[str, click.Command]:
    """Every command by its full name: the group itself and, recursively, its subcommands."""
    found = {"specllama": main}

    def walk(group: click.Group, prefix: str) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):  # the group loads its commands on first use
            cmd = group.get_command(ctx, name)
            found[f"{prefix} {name}"] = cmd
            if isinstance(cmd, click.Group):
                walk(cmd, f"{prefix} {name}")

    walk(main, "specllama")
    return found


def flag_tables() -> dict[str, list[tuple[set[str], set[str]]]]:
    """docs/flags.md as {"specllama generate": [(flag spellings, default cell's values), ...]}."""
    tables: dict[str, list[tuple[set[str], set[str]]]] = {}
    section = None
    for line in FLAGS_MD.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            tables[section] = []
        elif section and line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            tables[section].append((set(CODE.findall(cells[0])), set(CODE.findall(cells[-1]))))
    return tables


def documented_default(param: click.Option, cmd: click.Command) -> str | None:
    """The default as docs/flags.md writes it, or None when the flag has none."""
    value = param.get_default(click.Context(cmd), call=False)
    if callable(value) or value is None or value is UNSET or value == () or value == []:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def options() -> list[tuple[str, click.Command, click.Option]]:
    return [(name, cmd, p) for name, cmd in commands().items() for p in cmd.params if isinstance(p, click.Option)]


def option_cases() -> list:
    return [pytest.param(name, cmd, p, id=f"{name} {long_name(p)}") for name, cmd, p in options()]


def long_name(param: click.Option) -> str:
    longs = [o for o in param.opts if o.startswith("--")]
    return longs[0] if longs else param.opts[0]


def test_every_command_has_a_section():
    tables = flag_tables()
    missing = sorted(set(commands()) - set(tables))
    assert not missing, f"docs/flags.md has no '## ...' section for: {', '.join(missing)}"


def test_the_commands_are_found():
    # the walk sees the subcommands the lead's refactor keeps: a guard against an empty check
    assert {"specllama generate", "specllama chat", "specllama serve", "specllama bench", "specllama verify",
            "specllama rpc-server", "specllama models", "specllama pull"} <= set(commands())
    assert len(options()) > 100


@pytest.mark.parametrize("name,cmd,param", option_cases())
def test_flag_is_documented_with_its_default(name, cmd, param):
    rows = flag_tables().get(name)
    assert rows is not None, f"docs/flags.md: no section '## {name}'"
    flag = long_name(param)
    row = next((r for r in rows if flag in r[0]), None)
    assert row is not None, f"docs/flags.md, section '## {name}': flag {flag} is missing"
    spellings, defaults = row
    absent = [o for o in [*param.opts, *param.secondary_opts] if o not in spellings]
    assert not absent, f"docs/flags.md, '## {name}', row of {flag}: spelling(s) {', '.join(absent)} missing"
    expected = documented_default(param, cmd)
    if expected is not None:
        assert expected in defaults, (f"docs/flags.md, '## {name}', row of {flag}: default `{expected}` missing "
                                      f"(the default cell has {sorted(defaults) or 'no value in backticks'})")


def test_no_documented_flag_is_gone():
    """A row for a flag the command no longer has is caught too."""
    tables = flag_tables()
    for name, cmd in commands().items():
        real = {o for p in cmd.params if isinstance(p, click.Option) for o in [*p.opts, *p.secondary_opts]}
        for spellings, _ in tables.get(name, []):
            for s in sorted(spellings - {"flag"}):
                assert s in real, f"docs/flags.md, '## {name}': {s} is documented but the command has no such flag"


LINK = re.compile(r"\]\(([^)\s]+)\)|(?:src|href)=\"([^\"]+)\"")


def relative_links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    links = [a or b for a, b in LINK.findall(text)]
    return [link for link in links if not re.match(r"[a-z][a-z0-9+.-]*:", link) and not link.startswith("#")]


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes of a Markdown file's headings."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(path):
    assert path.exists(), f"{path.relative_to(ROOT)} is missing"
    broken = []
    for link in relative_links(path):
        file, _, anchor = link.partition("#")
        target = path.parent / file
        if not target.exists() or (anchor and target.suffix == ".md" and anchor not in anchors(target)):
            broken.append(link)
    assert not broken, f"{path.relative_to(ROOT)}: links to missing files or headings: {', '.join(broken)}"


def test_the_link_check_sees_links():
    assert "docs/web/chat.png" in relative_links(ROOT / "README.md")
    assert "specllama-serve" in anchors(FLAGS_MD)
    assert any(link.startswith("docs/") for link in relative_links(ROOT / "README.md"))


def test_the_docs_name_every_chat_format_and_every_llm_option():
    """usage.md's list of --chat-format names and llm-plugin.md's options table, against the code."""
    from specllama.chat_template import NAMED_FORMATS
    from specllama.llm_plugin import SpecLlama

    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    listed = usage[usage.index("`--chat-format NAME` picks one of the named"):][:300]
    assert [name for name in NAMED_FORMATS if f"`{name}`" not in listed] == []
    table = re.findall(r"^\| `(\w+)` \|", (ROOT / "docs" / "llm-plugin.md").read_text(encoding="utf-8"), re.M)
    assert set(SpecLlama.Options.model_fields) <= set(table)
