"""`nbdev_export` for minivllm: `make export` runs it (and `make sync-check` checks its result).

1. nbdev writes a notebook's `#| default_exp` module afresh and *appends* an `#| export other.mod`
   cell to a module that another notebook's `default_exp` created. minivllm's chapters also write
   small modules of their own beside their main one, where vLLM keeps those things apart (a
   chapter's figures into `minivllm/viz/`, its test fixtures into `minivllm/testing/`,
   `SchedulerConfig` into `minivllm/config.py`). Each module is written by exactly one notebook
   (`tests/test_layout.py` checks it), so here every module is written afresh.
2. Whole classes. A chapter may build a class method by method (fastcore's `@patch`, each method
   beside the prose that explains it); the package shows what vLLM's source shows, so an editor
   follows `self.schedule()` into its class. Each `@patch` function moves to the end of its class
   (of each class of a `self: A | B` annotation), in notebook order, under its cell's
   `# %% ../nbs/X.ipynb #id` marker, indented: every line still names the cell it came from. Its
   decorator takes its plain form: `@patch` goes, `@patch(as_prop=True)` becomes `@property`,
   `@patch(cls_method=True)` `@classmethod`; other decorators (`@torch.no_grad()`) stay. The
   `self` annotation goes; in a module without `from __future__ import annotations`, an annotation
   that names something defined after the class is quoted; an unused `patch` import goes.
   nbdev's `_modidx.py` (the docs' links) indexes `Class.method` as it did for `@patch`.
   `nbdev_update` (library -> notebooks) does not know this layout: it would write each class,
   with all its methods, into the cell that defines the class. Edit the notebooks, not minivllm/.
3. `minivllm/__init__.py` loads the public names (`PUBLIC_API`) on first use (`__getattr__`), which
   editors and type checkers cannot follow: the exporter adds an `if TYPE_CHECKING:` block that
   imports each of them from its module, so they resolve `from minivllm import LLM`.
4. C++ sources: a code cell whose first line is `%%writefile ../minivllm/csrc/...` holds one file.
   It is written here with the content IPython's magic writes when the notebook runs (the cell
   after its first line, ending in a newline), so running and exporting agree byte for byte. A file
   under minivllm/csrc/ that no cell writes is removed; two cells writing one file are an error.
"""
import ast, builtins, io, json, re, textwrap, tokenize
from functools import partial
from pathlib import Path

import nbdev.doclinks
from IPython.core.inputtransformer2 import TransformerManager
from IPython.core.magic_arguments import parse_argstring
from IPython.core.magics.osm import OSMagics
from nbdev.config import get_config
from nbdev.export import nb_export
from nbdev.maker import ModuleMaker

MARKER = "# %% "  # nbdev's cell marker: `# %% ../nbs/X.ipynb #cell_id`
PLAIN = {"patch": None, "patch(as_prop=True)": "@property",   # `@patch(...)` -> its plain form
         "patch(cls_method=True)": "@classmethod"}
INDENT = "    "


class FreshModuleMaker(ModuleMaker):
    "nbdev's `ModuleMaker`, writing every module afresh (each has one notebook that writes it)."
    def __init__(self, dest, name, nb_path, is_new=True, **kwargs):
        super().__init__(dest, name, nb_path, is_new=True, **kwargs)

    def make(self, cells, all_cells=None, lib_path=None):
        "nbdev's module, its classes whole (and the package's names for static tools)."
        super().make(cells, all_cells, lib_path)
        text = whole_classes(self.fname.read_text(encoding="utf-8"))
        if self.fname.resolve() == (get_config().lib_path / "__init__.py").resolve():
            text += static_imports(text)
        self.fname.write_text(text, encoding="utf-8")


def patch_form(node):
    "`(decorator, plain form)` of a `@patch` function (`None`: no decorator), else `None`."
    for d in getattr(node, "decorator_list", []):
        src = ast.unparse(d)
        if src.split("(")[0] != "patch": continue
        if src not in PLAIN: raise ValueError(f"`{node.name}`: no plain form of `@{src}` here")
        return d, PLAIN[src]


def names(node) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]


def bound(node) -> set[str]:
    "The names a top-level statement binds."
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return {n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def block_end(lines: list[str], stop: int) -> int:
    "`stop` (where a block's last statement ends), moved past indented comments that follow it."
    i = stop
    while i < len(lines) and (not lines[i].strip() or lines[i][0] in " \t"):
        i += 1
        if lines[i - 1].strip(): stop = i
    return stop


def span(fn, lines: list[str]) -> tuple[int, int]:
    "The lines `[start, stop)` of a top-level function: comments right above it, decorators, body."
    start = min([fn.lineno] + [d.lineno for d in fn.decorator_list]) - 1
    while start and lines[start - 1].startswith("#") and not lines[start - 1].startswith(MARKER):
        start -= 1
    return start, block_end(lines, fn.end_lineno)


def splice(lines: list[str], first: int, edits):
    """Apply `(line, col, end_line, end_col, text)` edits (ast's positions: lines from 1, UTF-8
    byte columns) to `lines`, which hold the module's lines from index `first`."""
    for l0, c0, l1, c1, text in sorted(edits, reverse=True):
        head, tail = lines[l0 - 1 - first].encode(), lines[l1 - 1 - first].encode()
        lines[l0 - 1 - first:l1 - first] = [(head[:c0] + text.encode() + tail[c1:]).decode()]


def indent(body: list[str]) -> list[str]:
    "`body` one level deeper; lines that continue a multi-line string (not a docstring) unchanged."
    text = "\n".join(body)
    fn = ast.parse(text).body[0]
    doc = fn.body[0].lineno if ast.get_docstring(fn, clean=False) is not None else None
    inside, starts = set(), []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == getattr(tokenize, "FSTRING_START", None): starts.append(tok.start[0])
        elif tok.type in (tokenize.STRING, getattr(tokenize, "FSTRING_END", None)):
            start = starts.pop() if tok.type != tokenize.STRING else tok.start[0]
            if start != doc: inside.update(range(start + 1, tok.end[0] + 1))
    return [INDENT + l if l.strip() and i + 1 not in inside else l for i, l in enumerate(body)]


def as_method(fn, plain, lines: list[str], start: int, stop: int, known: set[str], future: bool):
    """The lines `[start, stop)` of `@patch` function `fn` as a method: decorator in `plain` form,
    no `self` annotation, annotations naming what is not `known` where the class is defined quoted
    (unless `future`), indented. Defaults and other decorators must be `known` there."""
    body = lines[start:stop]
    self_ = fn.args.args[0]
    edits = [(self_.lineno, self_.col_offset, self_.end_lineno, self_.end_col_offset, self_.arg)]
    a = fn.args
    for arg in a.posonlyargs + a.args[1:] + a.kwonlyargs + [a.vararg, a.kwarg]:
        ann = getattr(arg, "annotation", None)
        if ann and not future and set(names(ann)) - known:
            edits.append((ann.lineno, ann.col_offset, ann.end_lineno, ann.end_col_offset,
                          json.dumps(ast.unparse(ann))))
    if fn.returns and not future and set(names(fn.returns)) - known:
        r = fn.returns
        edits.append((r.lineno, r.col_offset, r.end_lineno, r.end_col_offset,
                      json.dumps(ast.unparse(r))))
    dec, _ = patch_form(fn)
    others = [d for d in fn.decorator_list if d is not dec]
    for expr in a.defaults + [d for d in a.kw_defaults if d] + others:
        if set(names(expr)) - known:
            raise ValueError(f"`{fn.name}` uses {sorted(set(names(expr)) - known)} where its class "
                             "is defined: define them before the class")
    splice(body, start, edits)  # decorators sit above the `def` line: the edits did not move them
    body[dec.lineno - 1 - start:dec.end_lineno - start] = [plain] if plain else []
    return indent(body)


def whole_classes(text: str) -> str:
    "Module source `text` with each top-level `@patch` function moved into its class(es)."
    tree = ast.parse(text)
    patched = [(n, f[1]) for n in tree.body for f in [patch_form(n)] if f]
    if not patched: return text
    lines = text.split("\n")
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                 "annotations" in [a.name for a in n.names] for n in tree.body)
    cell_of, marker = [], None  # each line's cell marker
    for line in lines:
        marker = line if line.startswith(MARKER) else marker
        cell_of.append(marker)
    drop, after, moved = set(), {}, {}
    for fn, plain in patched:
        start, stop = span(fn, lines)
        drop.update(range(start, stop))
        for cls in patched_classes(tree, fn):
            known = names_in(tree, cls) - moved.setdefault(cls.name, set())
            method = as_method(fn, plain, lines, start, stop, known, future)
            end = block_end(lines, cls.end_lineno) - 1
            after.setdefault(end, []).extend(["", INDENT + cell_of[start], *method])
            moved[cls.name].add(fn.name)
    replace = drop_patch_import(tree, patched, drop)
    return assemble(lines, cell_of, drop, replace, after)


def patched_classes(tree, fn) -> list:
    "The classes (`ClassDef`s of `tree`) that `@patch` function `fn` adds itself to: `self: A | B`."
    ann = fn.args.args[0].annotation if fn.args.args else None
    if ann is None: raise ValueError(f"`{fn.name}`: `@patch` needs `self: Class`")
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for name in names(ann):
        if name not in classes:
            raise ValueError(f"`{fn.name}` patches `{name}`, not defined in its module")
        if classes[name].body[0].lineno == classes[name].lineno:
            raise ValueError(f"`class {name}`: write its body on lines of its own")
    return [classes[name] for name in names(ann)]


def names_in(tree, cls) -> set[str]:
    "The names a method's definition (defaults, decorators, annotations) can use at `cls`'s end."
    before = set().union(*(bound(n) for n in tree.body[:tree.body.index(cls)]))
    return (before | set(dir(builtins))) - set().union(*(bound(n) for n in cls.body))


def drop_patch_import(tree, patched, drop: set[int]) -> dict[int, str]:
    "Lines of the `patch` import, now unused, added to `drop`; the lines that replace them."
    decorators = {id(n) for fn, _ in patched for d in fn.decorator_list for n in ast.walk(d)}
    if any(isinstance(n, ast.Name) and n.id == "patch" and id(n) not in decorators
           for n in ast.walk(tree)): return {}
    replace = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and "patch" in [a.name for a in node.names]:
            node.names = [a for a in node.names if a.name != "patch"]
            drop.update(range(node.lineno - 1 + bool(node.names), node.end_lineno))
            if node.names: replace[node.lineno - 1] = ast.unparse(node)
    return replace


def assemble(lines, cell_of, drop: set[int], replace: dict[int, str], after: dict) -> str:
    """`lines` without `drop`, with `replace`, and `after[i]` inserted after line `i` (the methods
    at a class's end). Code after a class in its cell gets the cell's marker again; a cell left
    empty goes, marker and all; so do the blank lines that separated what was dropped."""
    for end in after:
        rest = [i for i in range(end + 1, len(lines)) if i not in drop and lines[i].strip()]
        if rest and not lines[rest[0]].startswith(MARKER):
            after[end] += ["", cell_of[end]]
            drop.update(range(end + 1, rest[0]))
    starts = [i for i, l in enumerate(lines) if l.startswith(MARKER)] + [len(lines)]
    for m, n in zip(starts, starts[1:]):
        cell = range(m + 1, n)
        if any(i in drop for i in cell) and all(i in drop or not lines[i].strip() for i in cell):
            drop.update(range(m, n))
    out, gap = [], False
    for i, line in enumerate(lines):
        if i in replace: out.append(replace[i])
        elif i in drop: gap = True; continue
        elif gap and not line.strip() and not (out[-1].strip() and not out[-1].startswith(MARKER)):
            continue
        else: out.append(line)
        gap = False
        out.extend(after.get(i, []))
    return "\n".join(out)


def public_api(init_text: str) -> dict[str, list[str]]:
    "`PUBLIC_API` (module -> the names it contributes) of the package's `__init__.py`."
    for n in ast.parse(init_text).body:
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PUBLIC_API":
            return ast.literal_eval(n.value)
    raise ValueError("minivllm/__init__.py defines no `PUBLIC_API`")


def static_imports(init_text: str) -> str:
    "The `__init__.py` lines that import every public name for static tools (not at run time)."
    lines = ["", "# %% auto #1", "# for editors and type checkers, which do not run `__getattr__`",
             "from typing import TYPE_CHECKING", "if TYPE_CHECKING:"]
    for mod, names_ in public_api(init_text).items():
        head = f"{INDENT}from .{mod} import "
        one = head + ", ".join(names_)
        lines.append(one if len(one) <= 100 else textwrap.fill(", ".join(names_), 99,
                     initial_indent=head + "(", subsequent_indent=" " * (len(head) + 1)) + ")")
    return "\n".join(lines) + "\n"


def csrc_files(nbs: Path, csrc: Path) -> dict[Path, str]:
    "The files under `csrc` that notebook cells write with `%%writefile`: path -> content."
    files, writers = {}, {}
    for nb in sorted(nbs.glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or not source.startswith("%%writefile"): continue
            call = ast.parse(TransformerManager().transform_cell(source)).body[0].value
            line, content = (a.value for a in call.args[1:])  # what IPython passes the magic
            args = parse_argstring(OSMagics.writefile, line)
            path = (nb.parent / re.sub(r"^(['\"])(.*)\1$", r"\2", args.filename)).resolve()
            if not path.is_relative_to(csrc.resolve()): continue
            where = f"{nb.name} (cell {cell.get('id')})"
            if args.append or path in files:
                raise ValueError(f"{path}: written by {writers.get(path, where)} and {where}; "
                                 "one cell writes a file")
            files[path], writers[path] = content, where
    return files


def write_csrc(nbs: Path, lib: Path):
    "Write the C++ files the notebooks' cells hold into `lib/csrc`; remove the ones none holds."
    csrc = lib / "csrc"
    files = csrc_files(nbs, csrc)
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            path.write_text(content, encoding="utf-8")  # text mode, as IPython's `%%writefile`
    for p in sorted(csrc.rglob("*"), reverse=True) + [csrc] * csrc.exists():  # deepest first
        if p.is_file() and p.resolve() not in files: p.unlink()
        elif p.is_dir() and not any(p.iterdir()): p.rmdir()


if __name__ == "__main__":
    nbdev.doclinks.nb_export = partial(nb_export, mod_maker=FreshModuleMaker)
    nbdev.doclinks.nbdev_export()
    write_csrc(get_config().nbs_path, get_config().lib_path)
