"""nbdev's notebook processing for the docs (what `nbdev_proc_nbs` does), minus Quarto: nbs/ -> _proc/.

Why not the `nbdev_proc_nbs` command itself: before processing, it tries to download and
`sudo`-install Quarto, runs `pip install -e .`, and writes _quarto.yml / nbdev.yml / sidebar.yml
into nbs/. Here we call the same machinery (`nbdev.serve._proc_file`, `nbdev.serve_drv.main`,
nbdev's `FilterDefaults` processors: `#| hide`, `#| export`, show_doc, doc links, front matter)
with three processors changed and one added:

* `rm_export` -> `rm_hidden`: exported cells stay on the page, as nbdev's `#| exports` would show
  them: a literate chapter shows the code it teaches. They are tagged `minivllm-export`
  (docs/stage_nbs.py, _static/custom.css); a cell that is only imports is folded (`hide-input`).
* `add_show_docs` -> `docs_add_show_docs`: nbdev adds a show_doc entry for every exported name
  that has none, but compares the bare name (`schedule`) with the documented ones
  (`Scheduler.schedule`), so each `@patch` method with its own show_doc got two entries; and
  it inserted a cell's entries in reverse order of the definitions.
* `exec_show_docs` -> `docs_exec_show_docs`: (and the imports an exported cell makes under
  `if TYPE_CHECKING:` are run too, since show_doc evaluates annotations such as `llm: LLM`)
* `cpp_cells`, before nbdev's `clean_magics` (which deletes `%` lines): a C++ source cell
  (`%%writefile ../minivllm/csrc/cpu/NAME.cpp`, which tools/export.py writes into the package)
  becomes highlighted C++ with its file as the caption; myst-nb highlights every code cell in the
  notebook's language, Python.

nbdev re-executes, in a fresh shell, every exported cell, every `show_doc` cell and every cell
that contains an import (so that show_doc has something to document), and stores the new
outputs back into those cells. For a cell that mixes imports with other code, that re-runs
teaching code out of context (nbdev warns "Found cells containing imports and other code"): it
fails on names defined in cells that were not run, or loads a model / runs a benchmark during
the docs build. Here, such ordinary cells keep their outputs (those of the notebook tests'
execution, docs/run_nbs.py, when the site is built from docs/_build/executed) and only their
top-level import statements are run. Exported cells, `#| exec_doc`
cells and show_doc cells are run exactly as nbdev does, and any failure there fails the build
(it would mean a missing API entry) -- except that in an executed notebook a show_doc cell that
already has its output from the notebook tests keeps it (it was computed with the whole
notebook run; nothing is executed twice); the show_doc cells nbdev adds itself still run here. If a show_doc needs a name defined in an ordinary cell,
mark that cell `#| exec_doc`.
The notebooks come from nbs/ (their saved outputs) or from a folder of executed notebooks
(docs/run_nbs.py writes docs/_build/executed/: the outputs of this run's notebook tests).
Usage: nbproc.py N_WORKERS [SOURCE_DIR]   (run from the repository root)
"""
import ast, re, sys
from pathlib import Path
from shutil import rmtree

import nbdev.serve, nbdev.serve_drv
from fastcore.basics import str2bool
from fastcore.parallel import parallel
from nbdev.config import get_config
from nbdev.doclinks import nbglob
from nbdev.process import Processor
from nbdev.processors import (FilterDefaults, add_show_docs, clean_magics, exec_show_docs,
                              rm_export, _do_eval, _is_showdoc, _want_doc, _show_docs, _get_nm,
                              cell_lang, _def_types)
from nbdev.showdoc import showdoc_nm
from execnb.nbio import mk_cell
from fastcore.foundation import L

_API_DIRS = {"export", "exports", "exporti", "exec_doc"}


def _imports_only(source):
    "The top-level import statements of `source` (empty string if it does not parse)."
    try: tree = ast.parse(source)
    except SyntaxError: return ""
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


def _type_checking_imports(source):
    """The imports under `if TYPE_CHECKING:` in `source`: show_doc evaluates a signature's
    annotations (`llm: LLM` under `from __future__ import annotations`), so names imported only for
    type checkers must exist in the docs' shell too."""
    try: tree = ast.parse(source)
    except SyntaxError: return ""
    out = []
    for n in tree.body:
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            out += [ast.unparse(m) for m in n.body if isinstance(m, (ast.Import, ast.ImportFrom))]
    return "\n".join(out)


def _has_markdown(cell):
    return any("text/markdown" in (o.get("data") or {}) for o in cell.get("outputs") or [])


class docs_exec_show_docs(exec_show_docs):
    "nbdev's exec_show_docs, but ordinary cells keep their saved outputs and may fail harmlessly."
    def begin(self):
        super().begin()
        # executed by docs/run_nbs.py: its show_doc outputs are fresh, computed in the full
        # notebook; only the show_doc cells nbdev adds (exported names without one) run here
        run = (self.nb.get("metadata") or {}).get("minivllm_executed") or {}
        self.fresh = bool(run.get("ok"))

    def __call__(self, cell):
        if not self.nb.has_docs_ or not hasattr(self, "k"): return
        fm = getattr(self.nb, "frontmatter_", {})
        if str2bool(fm.get("skip_showdoc", False)): return
        if not _do_eval(cell): return
        if self.fresh and _is_showdoc(cell) and _has_markdown(cell): return
        title = fm.get("title", "")
        if (cell.directives_.keys() & _API_DIRS) or _is_showdoc(cell):
            self.k.cell(cell)  # as nbdev: exported definitions and show_doc output
            if self.k.exc:
                raise Exception(f"Error{' in notebook: ' + title if title else ''} in cell {cell.idx_} :\n{cell.source}") from self.k.exc
            tc = _type_checking_imports(cell.source) if not _is_showdoc(cell) else ""
            if tc:
                self.k.run(tc)
                if self.k.exc:
                    print(f"docs: note: type-checking imports of cell {cell.idx_} of {title!r} failed: {self.k.exc!r}", flush=True)
            return
        imports = _imports_only(cell.source)  # ordinary cell: only what it imports
        if imports:
            self.k.run(imports)
            if self.k.exc:
                print(f"docs: note: imports of cell {cell.idx_} of {title!r} failed while preparing API docs: {self.k.exc!r}", flush=True)


class docs_add_show_docs(add_show_docs):
    """nbdev's add_show_docs, one entry per definition: nbdev compares a definition's bare name
    (`schedule`) with the names the notebook's show_doc cells document (`Scheduler.schedule`), so
    every `@patch` method that has its own show_doc cell got a second, added entry. Here the
    qualified name (`showdoc_nm`, what the added cell would document) is compared."""
    def begin(self):
        nb = self.nb
        exports = L(cell for cell in nb.cells if _want_doc(cell))
        trees = L(nb.cells).map(lambda c: c.parsed_()).concat()
        shown = {_get_nm(t) for t in _show_docs(trees)}
        for cell in reversed(exports):
            if cell_lang(cell) != "python": raise ValueError(f"can't export:\n{cell.source}")
            names = []
            for o in cell.parsed_() or []:
                if not isinstance(o, _def_types) or (o.name[0] == "_" and o.name[:2] != "__"): continue
                nm = showdoc_nm(o)
                if nm in shown or o.name in shown: continue
                shown.add(nm)
                names.append(nm)
            for nm in reversed(names):  # so that the entries follow the definitions' order
                new_cell = mk_cell(f"show_doc({nm})")
                new_cell.has_sd = True
                nb.cells.insert(cell.idx_ + 1, new_cell)
        nb.has_docs_ = shown or exports


_PLUMBING = (ast.Import, ast.ImportFrom)


def is_plumbing(source):
    "True when every top-level statement is an import (or an if/try around imports, `__all__`)."
    try: tree = ast.parse(source)
    except SyntaxError: return False
    def ok(n):
        if isinstance(n, _PLUMBING) or isinstance(n, ast.Pass): return True
        if isinstance(n, ast.Assign):
            return all(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
        if isinstance(n, ast.If): return all(map(ok, n.body + n.orelse))
        if isinstance(n, ast.Try):  # try: import x / except ImportError: x = None
            fallback = lambda s: ok(s) or (isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant))
            return all(map(ok, n.body + n.orelse + n.finalbody)) and all(
                fallback(s) for h in n.handlers for s in h.body)
        return False
    return bool(tree.body) and all(map(ok, tree.body))


EXPORT_TAG = "minivllm-export"   # read by docs/stage_nbs.py: exported source, shown on the page


class rm_hidden(Processor):
    """nbdev's rm_export, but exported cells stay on the page (nbdev's `#| exports`): a literate
    chapter shows the code it teaches. `#| hide` and `#| default_exp` cells still go; exported cells
    that are only imports are folded (myst-nb `hide-input`). Each exported cell records the module
    it goes to (`metadata.minivllm_module`, relative to the package, as `default_exp` writes it)."""
    def begin(self):  # directives are already parsed out of the sources (cell.directives_)
        self.mod = next((c.directives_["default_exp"][0] for c in self.nb.cells
                         if (getattr(c, "directives_", None) or {}).get("default_exp")), None)

    def cell(self, cell):
        d = cell.directives_ or {}
        if d.keys() & {"hide", "default_exp"}: del(cell["source"]); return
        if d.keys() & {"export", "exporti", "exports"} and cell.cell_type == "code":
            args = next((d[k] for k in ("export", "exporti", "exports") if d.get(k)), None)
            _tag_export(cell, args[0] if args else self.mod)


def _tag_export(cell, module):
    code = "\n".join(l for l in cell.source.splitlines() if not l.lstrip().startswith("#|"))
    tags = list(cell.setdefault("metadata", {}).get("tags", []))
    tags.append(EXPORT_TAG)
    if module: cell["metadata"]["minivllm_module"] = module
    if is_plumbing(code):
        tags.append("hide-input")
        cell["metadata"]["mystnb"] = {"code_prompt_show": "Show the module's imports",
                                      "code_prompt_hide": "Hide the module's imports"}
    cell["metadata"]["tags"] = tags


_re_cpp_file = re.compile(r"%%writefile\s+\.\./(\S+\.(?:cpp|h))")


def cpp_cells(cell):
    "A C++ source cell (`%%writefile ../minivllm/csrc/...`) as a C++ block captioned with its file."
    first, _, body = cell.source.partition("\n")
    m = _re_cpp_file.fullmatch(first.strip()) if cell.cell_type == "code" else None
    if not m: return
    fence = "`" * max([3] + [len(r) + 1 for r in re.findall("`{3,}", body)])
    cell.cell_type = "markdown"
    cell.source = f"{fence}{{code-block}} cpp\n:caption: `{m[1]}`\n\n{body}\n{fence}"
    for k in ("outputs", "execution_count"): cell.pop(k, None)


class DocsFilter(FilterDefaults):
    def base_procs(self):
        swap = {exec_show_docs: [docs_exec_show_docs], add_show_docs: [docs_add_show_docs],
                rm_export: [rm_hidden], clean_magics: [cpp_cells, clean_magics]}
        return [q for p in super().base_procs() for q in swap.get(p, [p])]


def proc_nbs(n_workers=2, src=None):
    "Process every notebook of `src` (default nbs/) into _proc/ (always all: links span chapters)."
    cfg = get_config()
    cache, path = cfg.config_path / "_proc", Path(src).resolve() if src else cfg.nbs_path
    if cache.exists(): rmtree(cache)
    cache.mkdir(parents=True)
    files = nbglob(path, func=Path, file_glob="", file_re="")
    files = files.map(nbdev.serve._proc_file, cache=cache, path=path).filter()
    files = [(s, d, DocsFilter if x is FilterDefaults else x) for s, d, x in files]
    parallel(nbdev.serve_drv.main, files, n_workers=n_workers, pause=0.01, method="spawn")
    return cache


if __name__ == "__main__":
    # import ourselves by name so the spawned workers can unpickle `nbproc.DocsFilter`
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import nbproc
    nbproc.proc_nbs(int(sys.argv[1]) if len(sys.argv) > 1 else 2,
                    sys.argv[2] if len(sys.argv) > 2 else None)
