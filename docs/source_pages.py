"""The package's source, as pages of the site: one highlighted page per module of `lib_path`.

API entries (nbdev's `show_doc`) link "source" to a line of the module that defines the name, on
the module's page here (`source/minivllm.scheduler.html#L-24`) -- not to a repository, which a
reader may not have (settings.ini's `git_url` does not exist). Modules are found by walking
`lib_path` (nothing is listed by hand), and each definition's line is read from the module's AST,
so a link never depends on line numbers that were right when a notebook was last run.
Used by docs/stage_nbs.py.
"""
import ast, html, re
from pathlib import Path

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

try:
    from nbdev.doclinks import patch_name
except Exception:  # nbdev missing: @patch methods are indexed under their bare name only
    def patch_name(o): return o.name

PAGE_DIR = "source"  # docs/_nbs/source/<module>.md -> _build/html/source/<module>.html
_re_nb = re.compile(r"^# %% (\S+\.ipynb)", re.M)
_re_src = re.compile(r"File to edit: (\S+\.ipynb)")


def modules(root, lib_path):
    "{repo-relative path: dotted module name} of every non-empty .py file under `lib_path` (but _modidx)."
    lib = Path(root) / lib_path
    out = {}
    for f in sorted(lib.rglob("*.py")):
        rel = f.relative_to(root)
        if f.name == "_modidx.py" or any(p.startswith((".", "__pycache__")) for p in rel.parts):
            continue
        if not f.read_text(encoding="utf-8").strip(): continue  # an empty __init__.py
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__": parts = parts[:-1]
        out[rel.as_posix()] = ".".join(parts)
    return out


def definitions(source):
    "{name: first line} of the module's definitions: `f`, `C`, `C.method`, `C.m` for `@patch`."
    try: tree = ast.parse(source)
    except SyntaxError: return {}
    out = {}
    def first_line(n): return min([n.lineno] + [d.lineno for d in n.decorator_list])
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            nm = patch_name(n) if not isinstance(n, ast.ClassDef) else n.name
            out.setdefault(nm, first_line(n))
            out.setdefault(n.name, first_line(n))
            if isinstance(n, ast.ClassDef):
                for m in n.body:
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        out.setdefault(f"{n.name}.{m.name}", first_line(m))
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, ast.Name): out.setdefault(t.id, n.lineno)
    return out


def page_name(module):
    return f"{PAGE_DIR}/{module}"


class SourceIndex:
    "The package's modules: their pages, and where each definition starts."
    def __init__(self, root, lib_path):
        self.root = Path(root)
        self.lib = str(lib_path).strip("/")
        self.mods = modules(root, lib_path)
        self.text = {p: (self.root / p).read_text(encoding="utf-8") for p in self.mods}
        self.defs = {p: definitions(t) for p, t in self.text.items()}

    def href(self, name, path=None, line=None, chapter=None):
        """Relative URL (from a top-level page) of `name`'s definition: in a module that `chapter`
        (a notebook's stem) writes and that defines `name` -- a method patched again by a later
        chapter has one definition per chapter --, else in module `path` (the file show_doc's link
        named), else in the one module that defines `name`."""
        defining = [p for p, d in self.defs.items() if name in d]
        own = [p for p in defining if chapter and chapter in self._chapters(p)]
        cands = own[:1] or ([path] if path in self.mods else defining)
        if len(cands) != 1: return None
        p = cands[0]
        ln = self.defs[p].get(name) or self.defs[p].get(name.split(".")[-1]) or line
        return f"{page_name(self.mods[p])}.html" + (f"#L-{ln}" if ln else "")

    def module_page(self, module):
        """(path, href) of a module named as `default_exp` / `#| export X` name it, relative to the
        package (`scheduler`, `core.sched.scheduler`, `__init__`), or None."""
        pkg = self.lib.replace("/", ".")
        dotted = re.sub(r"(^|\.)__init__$", "", f"{pkg}.{module}").strip(".") or pkg
        for path, mod in self.mods.items():
            if mod == dotted: return path, f"{page_name(mod)}.html"
        return None

    def _chapters(self, path):
        if not hasattr(self, "_chap"): self._chap = {}
        if path not in self._chap: self._chap[path] = self.chapters(path)
        return self._chap[path]

    def chapters(self, path):
        "Notebooks the module is exported from, in file order (nbdev's `# %% ../nbs/X.ipynb` marks)."
        t = self.text[path]
        seen = []
        for nb in _re_nb.findall(t) + _re_src.findall(t):
            stem = Path(nb).stem
            if stem not in seen: seen.append(stem)
        return seen

    def write_pages(self, out_dir, chapter_titles):
        "docs/_nbs/source/*.md and the index page source/index.md; returns the index's docname."
        d = Path(out_dir) / PAGE_DIR
        d.mkdir(parents=True, exist_ok=True)
        fmt = HtmlFormatter(linenos="inline", linespans="L", cssclass="highlight")
        rows = []
        for path, mod in self.mods.items():
            code = highlight(self.text[path], PythonLexer(), fmt)
            fence = "`" * max(4, 1 + max((len(m) for m in re.findall(r"`+", code)), default=0))
            chs = [c for c in self.chapters(path) if c in chapter_titles]
            links = ", ".join(f"[{chapter_titles[c]}](../{c}.ipynb)" for c in chs)
            n = self.text[path].count("\n")
            md = [f"# {path.replace('_', chr(92) + '_')}", "",
                  f"The module `{mod}` ({n} lines)"
                  + (f", written in {links}." if links else "."), "",
                  "It is generated from the notebooks (nbdev): edit the chapter, not this file.", "",
                  f"{fence}{{raw}} html", f'<div class="highlight-python notranslate source-listing">'
                  f"{code}</div>", fence, ""]
            (d / f"{mod}.md").write_text("\n".join(md), encoding="utf-8")
            rows.append((path, mod, links, n))
        idx = ["# Source code", "",
               "Every module of the package, highlighted, as the notebooks export it. An API entry's "
               "*source* link opens its definition here.", "",
               "| Module | Lines | Written in |", "|---|---:|---|"]
        idx += [f"| [`{p}`]({mod}.md) | {n} | {links.replace('](../', '](../') or '--'} |"
                for p, mod, links, n in rows]
        idx += ["", "```{toctree}", ":hidden:", ""] + [m for _, m, _, _ in rows] + ["```", ""]
        (d / "index.md").write_text("\n".join(idx), encoding="utf-8")
        return f"{PAGE_DIR}/index"
