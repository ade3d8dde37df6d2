"""Turn nbdev's processed notebooks (`_proc/`) into a Sphinx source tree (`docs/_nbs/`).

docs/nbproc.py (nbdev's processing, as `nbdev_proc_nbs` runs it) applies nbdev's directives: `#| hide`
cells are gone, `#| export` cells stay (tagged `minivllm-export`; imports-only ones folded),
`show_doc` cells are executed (their Markdown output is the API entry), backticked names are
linked to the docs, and the H1 title + `>` summary became a Quarto YAML front-matter raw cell.
What is left is Quarto-flavoured; this script translates the few Quarto-isms into what myst-nb
understands:

* front matter raw cell          -> `# NN · title` (the chapter's number), the whole summary in a
                                    `chapter-summary` box, and the rest of the notebook's H1 cell,
                                    all read from the source notebook (nbdev keeps only the first
                                    line of a summary and drops the rest of that cell)
* `show_doc` cell + md output    -> a Markdown cell: label `(api-...)=`, heading, signature,
                                    docstring, so API entries are real sections (sidebar,
                                    search, cross-reference targets)
* `#| echo: false`               -> myst-nb tag `remove-input`
* `#| output: false`             -> tag `remove-output`
* `#| include: false`            -> tag `remove-cell`
* `#| code-fold: true`           -> tag `hide-input` (collapsed "show code" toggle; `show`: open)
* the other `#|` lines at the top of a code cell -> removed from the displayed source
* nbdev's doc links (`{doc_host}{doc_baseurl}/PAGE.html#sym`) -> MyST links to the chapter
  (and to the `show_doc` entry when the chapter has one), so they are checked by Sphinx.
* show_doc's `[source](git_url/blob/...)` -> a link to the definition's line on the site's own
  page of its module (docs/source_pages.py writes docs/_nbs/source/: every module of lib_path,
  found by walking it); a second API entry for the same name on a page is dropped.
* a `show_doc` of a name whose code the page shows (a `class`/`def`, a method, a `@patch`) -> no
  entry, only its label, as an anchor on that code cell: the reader has just read the signature
  and the docstring, and links to the name land on the code (`code_anchors`).
* exported code of `minivllm.viz` (a figure's drawing) -> folded behind "Show the figure's code":
  the figure is the lesson; a chapter's own cell of imports (no output) -> folded too.
* an SVG output -> inline HTML, so its links work (the flowchart's badges link to the chapters);
  `.ipynb` links in HTML outputs -> the site's `.html` pages.
* under a chapter's title: where it sits on the reading path (docs/reading_path.py): the core path
  with the chapter marked, or, for a detour, the core chapter it hangs off and where the path goes on.

Chapters are discovered with a glob: `nbs/index.ipynb` is the home page, the other notebooks
follow in numeric order of their prefix (00_, 01_, ..., then unnumbered ones by name). A chapter's
part is the tens digit of its number (PARTS: 00-09 the scheduler, 10-19 the worker and the model,
20-29 the engine and serving, 30-39 lessons, 90-99 sources and API); the home page lists the
parts with each chapter's summary, and the sidebar shows one caption per part.
docs/_build/site_manifest.json records, per page, what docs/site_check.py verifies on the built
site: the `def`/`class` names the notebook exports (read from the source notebook) and its summary.

Checks (each failure is listed, then the script exits 1, failing the build):
* every chapter page shows results: at least one code output or API entry (a chapter whose
  outputs were never saved or produced renders as bare code);
* every `show_doc` cell has its Markdown output (else its API entry would be empty);
* when SRC is a folder of executed notebooks (docs/run_nbs.py), every notebook of nbs/ is there
  and its execution succeeded, so the site shows the results of that run.
Usage: stage_nbs.py REPO_ROOT [SRC]   (writes docs/_nbs/, removing what was there)
"""
import configparser, enum, importlib, json, re, shutil, sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from source_pages import SourceIndex  # noqa: E402
from nbproc import is_plumbing  # noqa: E402  (a cell that only imports)
import reading_path  # noqa: E402

_ARGS = sys.argv[1:] if __name__ == "__main__" else []  # importable (tests/test_site.py)
ROOT = Path(_ARGS[0] if _ARGS else Path(__file__).resolve().parent.parent)
CFG = configparser.ConfigParser()
CFG.read(ROOT / "settings.ini")
C = CFG["DEFAULT"]
NBS = ROOT / C.get("nbs_path", "nbs")
PROC = ROOT / "_proc"
OUT = ROOT / "docs" / "_nbs"
DOC_URL = (C.get("doc_host", "") + C.get("doc_baseurl", "")).rstrip("/")
SRC = Path(_ARGS[1]).resolve() if len(_ARGS) > 1 else NBS.resolve()
MANIFEST = ROOT / "docs" / "_build" / "site_manifest.json"  # what docs/site_check.py expects
GIT_URL = C.get("git_url", "").rstrip("/")

# Parts of the book: a chapter's part is the tens digit of its number (00-09, 10-19, ...)
PARTS = {0: "The scheduler", 1: "The worker and the model", 2: "The engine and serving",
         3: "Lessons", 9: "Sources and API"}
EXECUTED = SRC != NBS.resolve()  # built from docs/run_nbs.py's executed notebooks


# files of nbs/ that are not copied next to the chapters: sources (a stray README.md would become
# a page outside the table of contents) and Quarto/nbdev configuration
SKIP_SUFFIXES = {".ipynb", ".md", ".rst", ".py", ".yml", ".yaml"}


def chapter_number(stem):
    "The chapter's number as its file name writes it (`04_scheduler` -> '04'), or None."
    m = re.match(r"(\d+)_", stem)
    return m.group(1) if m else None


def part_of(stem):
    n = chapter_number(stem)
    if n is None: return "More"
    return PARTS.get(int(n) // 10, f"Chapters {int(n) // 10}0-{int(n) // 10}9")


def numbered(stem, title):
    n = chapter_number(stem)
    return f"{n} · {title}" if n else title


def plain(title):
    "A title as plain text (toctree entries do not render Markdown)."
    return re.sub(r"`([^`]*)`", r"\1", title).replace("\\", "")


_re_h1 = re.compile(r"^#\s+(\S.*?)\s*$", re.M)


def title_cell(nb):
    """(title, summary, rest) of the notebook's H1 cell, read from the source notebook: nbdev keeps
    only the first line of the `>` summary (so a two-line summary was cut mid-sentence) and drops
    whatever else the cell says. The summary is the whole blockquote paragraph (lazy continuation
    lines included); `rest` is the cell's text after it."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown": continue
        s = src(cell)
        m = _re_h1.search(s)
        if not m: continue
        lines, summary, i = s[m.end():].split("\n"), [], 0
        while i < len(lines) and not lines[i].strip(): i += 1
        if i < len(lines) and lines[i].lstrip().startswith(">"):
            while i < len(lines) and lines[i].strip():
                summary.append(re.sub(r"^\s*>\s?", "", lines[i]).strip()); i += 1
        return m.group(1), " ".join(x for x in summary if x), "\n".join(lines[i:]).strip()
    return None, "", ""


def exported_defs(nb):
    "`def NAME` / `class NAME` of every top-level definition in the notebook's exported cells."
    import ast
    out = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code": continue
        dirs, code = split_directives(src(cell))
        if not dirs.keys() & {"export", "exporti", "exports"}: continue
        try: tree = ast.parse(code)
        except SyntaxError: continue
        for n in tree.body:
            if isinstance(n, ast.ClassDef): out.append(f"class {n.name}")
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append(("async def " if isinstance(n, ast.AsyncFunctionDef) else "def ") + n.name)
    return out


def chapter_key(p: Path):
    m = re.match(r"(\d+)", p.stem)
    return (0, int(m.group(1)), p.stem) if m else (1, 0, p.stem)


def discover(folder=None):
    "Source notebooks in reading order: index first, then numbered chapters, then the rest."
    nbs = [p for p in Path(folder or NBS).glob("*.ipynb") if not p.name.startswith(("_", "."))]
    index = [p for p in nbs if p.stem == "index"]
    rest = sorted((p for p in nbs if p.stem != "index"), key=chapter_key)
    return index, rest


def src(cell):
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def nbdev_page(stem):
    "nbdev's html name for a notebook (`00_request` -> `request`), as in `_nbpath2html`."
    return re.sub(r"^\d+[a-zA-Z0-9]*_", "", stem.lower())


_re_dir = re.compile(r"^\s*#\|\s*([\w-]+)\s*:?\s*(.*?)\s*$")


def split_directives(source):
    "Split the `#|` directive lines (Quarto reads them at the top of a cell) from the code."
    dirs, lines = {}, source.splitlines()
    while lines and _re_dir.match(lines[0]):
        m = _re_dir.match(lines.pop(0))
        dirs[m.group(1)] = m.group(2)
    return dirs, "\n".join(lines).strip("\n")


def defined_names(code):
    """The names a code cell defines as show_doc names them: `f`, `C`, `C.method` (methods and
    class attributes of `class C`, and nbdev's `@patch def method(self: C)`)."""
    import ast
    try: tree = ast.parse(code)
    except SyntaxError: return set()
    names = set()
    for n in tree.body:
        if isinstance(n, ast.ClassDef):
            names.add(n.name)
            for m in n.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{n.name}.{m.name}")
                elif isinstance(m, (ast.Assign, ast.AnnAssign)):
                    for t in (m.targets if isinstance(m, ast.Assign) else [m.target]):
                        if isinstance(t, ast.Name): names.add(f"{n.name}.{t.id}")
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            patched = any(ast.unparse(d).split("(")[0] == "patch" for d in n.decorator_list)
            first = n.args.args[0].annotation if patched and n.args.args else None
            owners = [a.id for a in ast.walk(first) if isinstance(a, ast.Name)] if first else []
            names.update(f"{o}.{n.name}" for o in owners) if owners else names.add(n.name)
    return names


def showdoc_name(md):
    "The name a show_doc entry documents (its heading), or None."
    m = _re_heading.search(re.sub(r"^\s*---\s*\n", "", md))
    return m.group(2).replace("\\", "").strip("` ") if m else None


def md_outputs(cell):
    "The cell's Markdown outputs (show_doc writes one per call)."
    out = []
    for o in cell.get("outputs", []):
        t = o.get("data", {}).get("text/markdown")
        if t is not None: out.append("".join(t) if isinstance(t, list) else t)
    return out


# a show_doc cell, as nbdev recognises one (any line starting with show_doc: the cell may import
# the name first); nbdev hides its code and shows only the output
_re_showdoc = re.compile(r"^\s*show_doc\(", re.M)


_re_heading = re.compile(r"^(#{1,6})\s+(.+?)\s*$", re.M)


_re_srclink = re.compile(r"\[source\]\(([^)\s]*)\)(\{[^}]*\})?")


SIG_WIDTH = 96  # code blocks must fit the content column (100 characters; see _static/custom.css)


def _split_top(s):
    "Split `s` after each comma that is outside brackets and quotes."
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(s):
        if quote:
            if ch == quote and s[i - 1] != "\\": quote = None
        elif ch in "'\"": quote = ch
        elif ch in "([{": depth += 1
        elif ch in ")]}": depth -= 1
        elif ch == "," and depth == 0:
            parts.append(s[start:i + 1]); start = i + 1
    parts.append(s[start:])
    return [p.strip() for p in parts if p.strip()]


def wrap_signature(md, width=SIG_WIDTH):
    "Re-wrap the parameter lines of show_doc's signature block (nbdev's may be ~120 chars)."
    def fix(m):
        out = []
        for line in m.group(2).split("\n"):
            if len(line) <= width: out.append(line); continue
            indent = line[:len(line) - len(line.lstrip())]
            cur = indent
            for part in _split_top(line.strip()):
                if cur.strip() and len(cur) + 1 + len(part) > width:
                    out.append(cur.rstrip()); cur = indent
                cur += ("" if not cur.strip() else " ") + part
            out.append(cur.rstrip())
        return m.group(1) + "\n".join(out) + m.group(3)
    return re.sub(r"(```python\n)(.*?)(\n```)", fix, md, count=1, flags=re.S)


_re_blob = re.compile(r"/blob/[^/]+/([^#?]+)(?:#L(\d+))?")


def source_link(url, name, sources, chapter=None):
    """show_doc's [source](...) link -> a link to the definition on the site's source page of its
    module (docs/source_pages.py), or nothing when the module is not part of this package."""
    if sources is None: return ""
    m = _re_blob.search(url)
    path, line = (m.group(1), m.group(2)) if m else (None, None)
    href = sources.href(name, path, int(line) if line else None, chapter) if name else None
    if not href: return ""
    return f'<a class="api-source reference internal" href="{href}">source</a>'


def enum_members(md, name):
    """An Enum's signature block -> its class line and members: show_doc gives every Enum the
    signature of `EnumMeta.__call__`, `(*args, **kwds)`. The Enum is found through the module of
    the entry's source link."""
    link = _re_srclink.search(md)
    blob = _re_blob.search(link.group(1)) if link else None
    if not (blob and name): return md
    module = blob.group(1).removesuffix(".py").replace("/", ".")
    try: obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError): return md
    if not (isinstance(obj, type) and issubclass(obj, enum.Enum)): return md
    bases = ", ".join(b.__name__ for b in obj.__bases__)
    block = "\n".join([f"class {name}({bases}):", *(f"    {e.name} = {e.value!r}" for e in obj)])
    return re.sub(r"```python\n.*?\n```", lambda _: f"```python\n{block}\n```", md, count=1,
                  flags=re.S)


def api_label(name, labels):
    "(anchor, label) of the API entry or code anchor for `name`; labels stay unique on the site."
    anchor = name.lower()
    label = base = "api-" + re.sub(r"[^a-z0-9_.]+", "-", anchor)
    n = 2
    while label in labels:  # same name shown twice: keep labels unique (first one wins links)
        label, n = f"{base}-{n}", n + 1
    labels.add(label)
    return anchor, label


def showdoc_to_markdown(md, labels, sources=None, seen=None, chapter=None):
    """show_doc's Markdown output -> Markdown cell text: label, heading, source link, signature, doc.
    Returns (text, (anchor, label)), or (None, name) when `seen` already holds this name (the page
    has its entry: one entry per definition)."""
    # leading horizontal rule dropped: docutils rejects a transition right before a section title
    md = re.sub(r"^\s*---\s*\n", "", md)
    md = wrap_signature(md)
    m = _re_heading.search(md)
    name = m.group(2).replace("\\", "").strip("` ") if m else None
    if seen is not None and name:
        if name in seen: return None, name
        seen.add(name)
    md = enum_members(md, name)
    # `[source](url){target=... style=...}` is Quarto attribute syntax pointing at `git_url`: the
    # link goes to the module's page in this site instead (or goes, if there is none)
    md = _re_srclink.sub(lambda k: source_link(k.group(1), name, sources, chapter), md)
    m = _re_heading.search(md)
    if not m: return md, None
    anchor, label = api_label(name, labels)
    body = (md[:m.start()] + md[m.end():]).strip()
    heading = m.group(0).strip()
    if "`" not in heading:  # `__getattr__` is a name, not bold `getattr`
        heading = m.group(1) + " " + re.sub(r"(?<!\\)_", r"\_", m.group(2).strip())
    return f"({label})=\n{heading}\n\n{body}\n", (anchor, label)


def frontmatter(cell):
    s = src(cell).strip()
    if cell["cell_type"] != "raw" or not s.startswith("---"): return None
    try:
        return yaml.safe_load(s.strip("-\n")) or {}
    except yaml.YAMLError:
        return None


def linkify(text):
    "nbdev's doc links for backticked names (the H1 cell's text, which nbdev's processing drops)."
    try:
        from nbdev.doclinks import NbdevLookup
        return NbdevLookup().linkify(text)
    except Exception:
        return text


def inline_svg(cell):
    """An SVG output goes into the page itself, as HTML, so that its links work (myst-nb would show
    it as an <img>, whose links a browser ignores): the flowchart's badges link to the chapters."""
    for o in cell.get("outputs", []):
        d = o.get("data", {})
        if "image/svg+xml" not in d: continue
        svg = "".join(d.pop("image/svg+xml"))
        svg = svg[svg.index("<svg"):]                  # no XML declaration or DOCTYPE inside HTML
        d["text/html"] = f'<div class="inline-svg">{svg}</div>'
        d.pop("image/png", None)


def shown_definitions(cells):
    "{name: index of the code cell that defines it} for the code cells a page shows."
    shown = {}
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code": continue
        dirs, code = split_directives(src(cell))
        tags = cell.get("metadata", {}).get("tags", [])
        if _re_showdoc.search(code) or {"remove-cell", "remove-input"} & set(tags) or \
                "false" in (dirs.get("echo", "").lower(), dirs.get("include", "").lower()):
            continue
        for name in defined_names(code): shown.setdefault(name, i)
    return shown


def code_anchors(cells, labels, shown):
    """show_doc entries of names whose code the page shows become anchors on that code: no stub
    repeating a signature and docstring the reader has just read. Returns ({cell index: [label]},
    {anchor: label}, {names anchored})."""
    targets, api, anchored = {}, {}, set()
    for cell in cells:
        if cell["cell_type"] != "code" or not _re_showdoc.search(src(cell)): continue
        for md in md_outputs(cell):
            name = showdoc_name(md)
            if name not in shown or name in anchored: continue
            anchor, label = api_label(name, labels)
            targets.setdefault(shown[name], []).append(label)
            api.setdefault(anchor, label)
            anchored.add(name)
    return targets, api, anchored


def path_box(stem, path, titles):
    "Markdown under a chapter's title: where it sits on the reading path (docs/reading_path.py)."
    if path is None: return ""
    role = reading_path.role(stem)
    link = lambda st: f"[{titles.get(st, st)}]({st}.ipynb)"
    if role == "core":
        steps = [f"**{reading_path.number(st)}**" if st == stem else
                 f"[{reading_path.number(st)}]({st}.ipynb)" for st in path.core]
        i = path.core.index(stem) + 1
        text = f"The core path, chapter {i} of {len(path.core)}: " + " → ".join(steps)
    elif role == "detour":
        home = path.by_num[reading_path.anchor(stem)]
        nxt = path.next(home)
        text = (f"A detour from {link(home)}, optional on a first reading; the core path goes on "
                f"with {link(nxt)}." if nxt else f"A detour from {link(home)}.")
    else:
        return ""
    return f"\n:::{{container}} reading-path\n{text}\n:::\n"


FOLD_PROMPTS = {"code_prompt_show": "Show the figure's code ({module})",
                "code_prompt_hide": "Hide the figure's code ({module})"}


def convert(nb, stem, labels, problems=None, head=None, sources=None, notes=None, path=None,
            titles=None):
    """Rewrite one processed notebook in place; returns its {anchor: label} map of API entries.
    `head`: (title, summary, rest) of the source notebook's H1 cell (see `title_cell`); `path`:
    the reading path (`reading_path.Path`) and `titles` the pages' titles, for the path box."""
    cells, title, seen = [], None, set()
    problems = [] if problems is None else problems
    notes = [] if notes is None else notes
    h_title, h_summary, h_rest = head or (None, "", "")
    targets, api, anchored = code_anchors(nb["cells"], labels, shown_definitions(nb["cells"]))
    seen |= anchored
    for i, cell in enumerate(nb["cells"]):
        s = src(cell)
        fm = frontmatter(cell) if cell["cell_type"] == "raw" and title is None else None
        if fm is not None:
            title = h_title or fm.get("title") or stem
            text = f"# {numbered(stem, title)}\n"
            summary = h_summary or fm.get("description")
            if summary: text += f"\n:::{{container}} chapter-summary\n{summary}\n:::\n"
            text += path_box(stem, path, titles or {})
            if h_rest: text += "\n" + linkify(h_rest) + "\n"
            cells.append({"cell_type": "markdown", "metadata": {}, "source": text})
            continue
        if cell["cell_type"] == "markdown" and s.strip().startswith("<!-- WARNING: THIS FILE WAS AUTOGENERATED"):
            continue
        if cell["cell_type"] == "code":
            dirs, code = split_directives(s)
            mds = md_outputs(cell)
            if _re_showdoc.search(code) and mds:
                for md in mds:
                    if showdoc_name(md) in anchored: continue   # an anchor on the code instead
                    text, entry = showdoc_to_markdown(md, labels, sources, seen, stem)
                    if text is None:
                        notes.append(f"{stem}: a second API entry for `{entry}` dropped"); continue
                    if entry: api.setdefault(entry[0], entry[1])
                    cells.append({"cell_type": "markdown", "metadata": {}, "source": text})
                continue
            hidden = "remove-cell" in cell.get("metadata", {}).get("tags", [])
            if _re_showdoc.search(code) and not hidden:
                problems.append(f"{stem}: `{code.strip()[:60]}` has no output (empty API entry)")
            tags = list(cell.get("metadata", {}).get("tags", []))
            if dirs.get("echo", "").lower() == "false": tags.append("remove-input")
            if dirs.get("output", "").lower() == "false": tags.append("remove-output")
            if dirs.get("include", "").lower() == "false": tags.append("remove-cell")
            # Quarto's `code-fold: show` (nbdev adds it to `#| exports` cells) is open: shown
            if "code-fold" in dirs and dirs["code-fold"].lower() not in ("false", "show"):
                tags.append("hide-input")
            cell["source"] = code
            inline_svg(cell)
            md_ = cell.setdefault("metadata", {})
            mod = md_.get("minivllm_module")
            if "minivllm-export" not in tags and not cell.get("outputs") and is_plumbing(code):
                tags.append("hide-input")          # a chapter's own imports: scaffolding, folded
                md_["mystnb"] = {"code_prompt_show": "Show the imports",
                                 "code_prompt_hide": "Hide the imports"}
            folded = "hide-input" in tags          # imports only (docs/nbproc.py), or asked for
            # a figure's code (minivllm.viz) is folded: the figure is the lesson, not its drawing
            figure_code = "minivllm-export" in tags and (mod or "").startswith("viz.")
            if figure_code and not folded:
                tags.append("hide-input")
                md_["mystnb"] = {k: v.format(module=f"minivllm/{mod.replace('.', '/')}.py")
                                 for k, v in FOLD_PROMPTS.items()}
            if tags: md_["tags"] = sorted(set(tags))
            if not code.strip() and not cell.get("outputs"): continue
            # exported code (docs/nbproc.py): a small label names the module and links its page
            page = sources.module_page(mod) if (sources and mod) else None
            if page and "minivllm-export" in tags and not folded:
                cells.append({"cell_type": "markdown", "metadata": {}, "source":
                              f'<p class="export-label">exported to <a class="reference internal" '
                              f'href="{page[1]}"><code>{page[0]}</code></a></p>\n'})
            if i in targets:   # the API anchors of the names this cell defines (code_anchors)
                cells.append({"cell_type": "markdown", "metadata": {},
                              "source": "".join(f"({label})=\n" for label in targets[i])})
        cells.append(cell)
    if title is None:  # no H1 + summary in the notebook: give the page a title anyway
        first_md = next((src(c) for c in cells if c["cell_type"] == "markdown"), "")
        if not re.match(r"^#\s", first_md.lstrip()):
            cells.insert(0, {"cell_type": "markdown", "metadata": {}, "source": f"# {stem}\n"})
    for i, c in enumerate(cells):  # nbformat 4.5 wants ids; show_doc/our cells have none
        c["id"] = c.get("id") or f"{re.sub(r'[^A-Za-z0-9-]', '-', stem)}-{i}"
    nb["cells"] = cells
    return api


def rewrite_links(nb, page2doc, api):
    "Point nbdev's absolute doc links at the local chapters (and API entries)."
    if not DOC_URL: return
    pat = re.compile(r"\[([^\[\]]*)\]\(" + re.escape(DOC_URL) + r"/([\w.-]+)\.html(?:#([^)\s]*))?\)")

    def sub(m):
        text, page, anchor = m.groups()
        doc = page2doc.get(page)
        if doc is None: return text  # no such chapter (yet): plain text, not a dead link
        label = api.get(doc, {}).get((anchor or "").lower())
        return f"[{text}](#{label})" if label else f"[{text}]({doc}.ipynb)"

    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = pat.sub(sub, src(cell))
        for o in cell.get("outputs", []):
            d = o.get("data", {})
            if "text/markdown" in d:
                d["text/markdown"] = pat.sub(sub, "".join(d["text/markdown"]) if isinstance(d["text/markdown"], list) else d["text/markdown"])
            if "text/html" in d:   # an HTML output's links to chapters (the flowchart's badges)
                d["text/html"] = html_links("".join(d["text/html"]) if isinstance(
                    d["text/html"], list) else d["text/html"])


_re_nb_href = re.compile(r'((?:xlink:)?href=")(\d+_[\w-]+|index)\.ipynb([#"])')


def html_links(html):
    "`href=\"04_scheduler.ipynb#x\"` (what works in JupyterLab) -> the site's `04_scheduler.html#x`."
    return _re_nb_href.sub(r"\1\2.html\3", html)


def core_path_list(path, md_titles):
    "The home page's reading path: the core chapters in order, each with its detours."
    out = ["**The core path**, in this order (each chapter's recap links the next one; a detour's "
           "recap leads back to the path):", ""]
    for i, st in enumerate(path.core, 1):
        detours = ", ".join(f"[{md_titles[d]}]({d}.ipynb)" for d in path.detours(st))
        out.append(f"{i}. [{md_titles[st]}]({st}.ipynb)" + (f"; detours: {detours}" if detours else ""))
    return out + [""]


def main():
    index, chapters = discover(SRC)
    if OUT.exists(): shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    # non-notebook files next to the notebooks (images referenced from Markdown, e.g. the saved
    # figure of a `#| notest` run in nbs/images/) come along; nbdev's processing copies only the
    # top folder (settings.ini: recursive = False), so subfolders are taken from SRC itself
    for base in (PROC, SRC):
        for f in base.rglob("*"):
            rel = f.relative_to(base)
            if f.is_file() and f.suffix not in SKIP_SUFFIXES and not any(
                    p.startswith((".", "_")) for p in rel.parts) and not (OUT / rel).exists():
                (OUT / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, OUT / rel)
    labels, nbs, api, page2doc, problems, sources = set(), {}, {}, {}, [], set()
    notes, manifest, titles, md_titles = [], {}, {}, {}
    lib = SourceIndex(ROOT, C.get("lib_path", C.get("lib_name", "")))
    heads = {p.stem: title_cell(json.loads(p.read_text(encoding="utf-8"))) for p in index + chapters}
    for stem, head in heads.items():
        title = head[0] or stem
        titles[stem] = numbered(stem, plain(title)) if stem != "index" else plain(title)
        md_titles[stem] = numbered(stem, title)  # with its `code`, for Markdown links
    path = reading_path.Path(heads)
    for p in index + chapters:
        proc = PROC / p.name
        if not proc.exists(): sys.exit(f"stage_nbs: {proc} missing: did proc_nbs fail?")
        nb = json.loads(proc.read_text(encoding="utf-8"))
        if EXECUTED:
            run = nb.get("metadata", {}).get("minivllm_executed")
            if not run: problems.append(f"{p.stem}: not executed by docs/run_nbs.py into {SRC}")
            elif not run.get("ok"):
                problems.append(f"{p.stem}: its execution failed (see the notebook tests)")
            else:
                orig = Path(run["notebook"])
                sources.add(orig.parent)
                if orig.exists() and p.stat().st_mtime < orig.stat().st_mtime:
                    print(f"stage_nbs: note: {orig} changed after it was executed", flush=True)
        raw = json.loads(p.read_text(encoding="utf-8"))
        head = heads[p.stem]
        api[p.stem] = convert(nb, p.stem, labels, problems, head, lib, notes, path, md_titles)
        manifest[p.stem] = {"page": f"{p.stem}.html", "number": chapter_number(p.stem),
                            "part": part_of(p.stem) if p.stem != "index" else None,
                            "title": titles[p.stem], "summary": head[1],
                            "exports": exported_defs(raw), "role": reading_path.role(p.stem),
                            "next": path.next(p.stem), "prev": path.prev(p.stem)}
        n_out = sum(1 for c in nb["cells"] if c["cell_type"] == "code" and c.get("outputs"))
        if p.stem != "index" and n_out + len(api[p.stem]) == 0:
            problems.append(f"{p.stem}: the page has no outputs (run the notebook and save it)")
        # myst-nb picks the code lexer from the notebook metadata; default to Python
        nb.setdefault("metadata", {}).setdefault("language_info", {"name": "python", "pygments_lexer": "ipython3"})
        nbs[p.stem] = nb
        page2doc[nbdev_page(p.stem)] = p.stem
    page2doc.setdefault("index", "index")
    for folder in sources:  # every notebook of the folder that was executed must be on the site
        for p in sum(discover(folder), []):
            if p.stem not in nbs:
                problems.append(f"{p.stem}: in {folder} but not executed into {SRC}")
    for stem, nb in nbs.items():
        rewrite_links(nb, page2doc, api)
    # the module source pages (the API entries' "source" links), listed last in the sidebar
    src_index = lib.write_pages(OUT, {k: v for k, v in titles.items() if k != "index"})
    # the home page: the index notebook (or a stand-in) followed by the reading path, part by part
    # (a part is the tens digit of the chapter numbers), each chapter with its summary; the hidden
    # toctrees make the sidebar: one caption per part, chapters shown with their numbers
    parts = {}
    for p in chapters: parts.setdefault(part_of(p.stem), []).append(p.stem)
    toc = []
    for i, (part, stems) in enumerate(parts.items()):
        entries = [f"{titles[st]} <{st}>" for st in stems]
        if i == len(parts) - 1: entries.append(f"Source code <{src_index}>")
        toc += ["", "```{toctree}", ":maxdepth: 1", ":hidden:", f":caption: {part}", ""]
        toc += entries + ["```", "", f"**{part}**", ""]
        for st in stems:
            summ = manifest[st]["summary"]
            toc.append(f"- [{md_titles[st]}]({st}.ipynb)" + (f": {summ}" if summ else ""))
        if i == len(parts) - 1:
            toc.append(f"- [Source code]({src_index}.md): every module of the package, highlighted.")
        toc.append("")
    toc = ["", "## Chapters", ""] + core_path_list(path, md_titles) + toc
    if index:
        nbs["index"]["cells"].append({"cell_type": "markdown", "id": "toc-chapters", "metadata": {}, "source": "\n".join(toc)})
    else:
        title, desc = C.get("title", C.get("lib_name", "docs")), C.get("description", "")
        (OUT / "index.md").write_text(f"# {title}\n\n> {desc}\n" + "\n".join(toc), encoding="utf-8")
    for stem, nb in nbs.items():
        (OUT / f"{stem}.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
    MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    MANIFEST.write_text(json.dumps({"pages": manifest, "git_url": GIT_URL, "doc_url": DOC_URL,
                                    "modules": {p: m for p, m in lib.mods.items()}},
                                   indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"stage_nbs: {len(nbs)} notebook(s) from {SRC} -> {OUT.relative_to(ROOT)}: "
          + ", ".join(nbs) + f"; {len(lib.mods)} module source page(s)", flush=True)
    for n in notes: print(f"stage_nbs: note: {n}", flush=True)
    if problems:
        print("stage_nbs: FAILED:\n  " + "\n  ".join(problems), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
