"""The shape of the package: no import circle, and light modules that stay light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "specllama"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """specllama's modules -> the specllama modules each imports, anywhere in
    its source (at the top or inside a function)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                # `from . import rpc` imports the submodule; `from .x import y` the module x
                found = submodules if len(submodules) == len(node.names) else [target, *submodules]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            graph[name].update(m for m in found if m in modules and m != name)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    assert len(graph) > 40 and "specllama.cli_flags" in graph["specllama.cli"]
    assert find_cycles(graph) == []


def test_the_cycle_finder_finds_a_planted_circle():
    graph = import_graph()
    graph["specllama.cli_flags"].add("specllama.cli")  # what the option helpers once did
    # found from whichever of the two the walk reaches first
    assert [c for c in find_cycles(graph) if set(c) == {"specllama.cli", "specllama.cli_flags"} and len(c) == 3]


@pytest.mark.parametrize("module", ["specllama.server.schemas", "specllama.options", "specllama.sampling",
                                    "specllama.chat_template"])
def test_light_modules_do_not_load_llama_cpp_or_click(module):
    code = (f"import sys, {module}; "
            "print(sorted(m for m in ('llama_cpp', 'click', 'specllama.cli', 'specllama.opener') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_name_is_what_it_names_whatever_was_imported_first():
    """A public name that is also a submodule's (``generate`` was both) became the module once any import loaded
    it: ``from specllama import generate`` after ``open_engine`` gave a module. No public name is a submodule's."""
    code = ("import specllama, specllama.api, specllama.cli, specllama.opener, types\n"
            "print(sorted(n for n in specllama.__all__ if isinstance(getattr(specllama, n), types.ModuleType)))\n"
            "from specllama import generate, stream_generate\n"
            "print(callable(generate), callable(stream_generate))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "True True"]
    modules = {_module_name(p).rsplit(".", 1)[-1] for p in PACKAGE.rglob("*.py")}
    import specllama

    assert sorted(set(specllama.__all__) & modules) == []


def test_former_public_names_still_work_with_a_deprecation_warning():
    import specllama
    from specllama import sampling

    for module in (specllama, sampling):
        with pytest.warns(DeprecationWarning, match="use .*accept_tokens"):
            assert module.verify is sampling.accept_tokens


def test_every_rule_default_reads_default_rule():
    """engine.steps, stream_generate's record, bench and the API: one default."""
    import inspect

    from specllama import api, bench, engine, options
    from specllama.sampling import DEFAULT_RULE

    assert options.GenerationOptions().rule == DEFAULT_RULE == "block"
    assert inspect.signature(engine.SpeculativeEngine.steps).parameters["rule"].default == DEFAULT_RULE
    assert inspect.signature(api.SpeculativeLlama).parameters["rule"].default == DEFAULT_RULE
    assert inspect.signature(bench.run_bench).parameters["rules"].default == (DEFAULT_RULE,)
    assert inspect.signature(bench._run_once).parameters["rule"].default == DEFAULT_RULE
