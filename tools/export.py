"""`nbdev_export` for minivllm: `make export` runs it (and `make sync-check` checks its result).

1. nbdev writes a notebook's `#| default_exp` module afresh and *appends* an `#| export other.mod`
   cell to a module that another notebook's `default_exp` created. minivllm's chapters also write
   small modules of their own beside their main one, where vLLM keeps those things apart (a
   chapter's figures into `minivllm/viz/`, its test fixtures into `minivllm/testing/`,
   `SchedulerConfig` into `minivllm/config.py`). Each module is written by exactly one notebook
   (`tests/test_layout.py` checks it), so here every module is written afresh.
2. Chapters build a class method by method (`@patch`, each method beside the prose that explains
   it). For editors and type checkers, every module that patches a class gets a stub (`.pyi`)
   where the class is whole: each patched method moved into its class, bodies elided.
"""
import ast
from functools import partial
from pathlib import Path

import nbdev.doclinks
from nbdev.export import nb_export
from nbdev.maker import ModuleMaker


class FreshModuleMaker(ModuleMaker):
    "nbdev's `ModuleMaker`, writing every module afresh (each has one notebook that writes it)."
    def __init__(self, dest, name, nb_path, is_new=True, **kwargs):
        super().__init__(dest, name, nb_path, is_new=True, **kwargs)


def _is_patch(node) -> bool:
    return any(ast.unparse(d) == "patch" for d in getattr(node, "decorator_list", []))


def _patched_classes(fn: ast.FunctionDef) -> list[str]:
    "The classes a `@patch` function is added to: its `self` annotation (`A` or `A | B`)."
    ann = fn.args.args[0].annotation if fn.args.args else None
    return [n.id for n in ast.walk(ann) if isinstance(n, ast.Name)] if ann else []


def _elide(node):
    "Replace every function body under `node` with `...` (docstrings kept)."
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = n.body[0] if n.body and isinstance(n.body[0], ast.Expr) and \
                isinstance(getattr(n.body[0], "value", None), ast.Constant) else None
            n.body = ([doc] if doc else []) + [ast.Expr(ast.Constant(...))]
    return node


def make_stub(py: Path) -> str:
    "The `.pyi` text of module `py`: its classes whole, every function body elided."
    tree = ast.parse(py.read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    body = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and _is_patch(node):
            node.decorator_list = [d for d in node.decorator_list if ast.unparse(d) != "patch"]
            for name in _patched_classes(node):
                if name in classes:
                    methods = classes[name].body
                    methods[:] = [m for m in methods if getattr(m, "name", None) != node.name]
                    methods.append(node)
        else: body.append(node)
    tree.body = body
    return ast.unparse(_elide(tree)) + "\n"


def package_stub(init: Path) -> str:
    "The package's `__init__.pyi`: each public name imported from its module (`PUBLIC_API`), which"
    " `__init__.py` loads lazily where static tools cannot follow."
    api = next(n.value for n in ast.parse(init.read_text()).body if isinstance(n, ast.Assign)
               and getattr(n.targets[0], "id", "") == "PUBLIC_API")
    lines = [f"from .{mod} import {', '.join(f'{n} as {n}' for n in names)}"
             for mod, names in ast.literal_eval(api).items()]
    return "\n".join(lines) + "\n__version__: str\n"


def write_stubs(lib: Path = Path("minivllm")):
    "A stub beside every module that patches a class, and the package's; stale stubs removed."
    for pyi in lib.rglob("*.pyi"): pyi.unlink()
    for py in sorted(lib.rglob("*.py")):
        if "\n@patch" in py.read_text(): py.with_suffix(".pyi").write_text(make_stub(py))
    (lib / "__init__.pyi").write_text(package_stub(lib / "__init__.py"))


if __name__ == "__main__":
    nbdev.doclinks.nb_export = partial(nb_export, mod_maker=FreshModuleMaker)
    nbdev.doclinks.nbdev_export()
    write_stubs()
