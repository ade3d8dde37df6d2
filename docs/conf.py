# Sphinx configuration for minivllm's docs site (built by docs/build.sh; see docs/README.md).
# Sources: docs/_nbs/, nbdev's processed notebooks as staged by docs/stage_nbs.py.
# The notebooks are NOT executed here: docs/run_nbs.py (the notebook tests) executed them once,
# and build.sh stages those executed notebooks, so the pages show that run's outputs.
import configparser, importlib.util
from pathlib import Path

_root = Path(__file__).resolve().parent.parent
_cfg = configparser.ConfigParser()
_cfg.read(_root / "settings.ini")
_s = _cfg["DEFAULT"]

project = _s.get("title", "minivllm")
author = _s.get("author", "")
copyright = _s.get("copyright", "")
release = version = _s.get("version", "")

extensions = ["myst_nb"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "jupyter_execute"]
source_suffix = {".ipynb": "myst-nb", ".md": "myst-nb"}

# --- myst / myst-nb -------------------------------------------------------------------------
nb_execution_mode = "off"          # outputs come from docs/run_nbs.py's execution (see above)
nb_output_stderr = "remove"        # warnings/progress bars on stderr are noise on a teaching page
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist", "html_image", "strikethrough", "attrs_inline"]
myst_heading_anchors = 3           # [text](04_scheduler.ipynb#some-heading): GitHub-style slugs
nb_render_markdown_format = "myst"  # Markdown outputs (tables, show_doc) rendered like cells

# Harmless warnings (everything else fails the build under -W; see build.sh):
suppress_warnings = [
    "myst.header",                 # "Non-consecutive header level increase" (H1 -> H3, e.g. a
                                   # show_doc entry right after the title): layout only
    "misc.highlighting_failure",   # Pygments could not lex a snippet: shown as plain text
]

# --- HTML -------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = project
# Math offline: `$...$` and `$$...$$` in the notebooks (myst's dollarmath) are typeset by MathJax 3
# from the site itself (_static/mathjax/), never from a CDN. MathJax comes from the pinned
# sphinx-mathjax-offline package (requirements.txt); its static folder is copied here instead of
# loading it as an extension (which Sphinx would run without parallel reading).
_mathjax = importlib.util.find_spec("sphinx-mathjax-offline")
if _mathjax is None or not _mathjax.submodule_search_locations:
    raise RuntimeError("docs: sphinx-mathjax-offline is not installed (pip install -r requirements.txt)")
_mathjax_static = Path(list(_mathjax.submodule_search_locations)[0]) / "static"
mathjax_path = "mathjax/tex-chtml.js"
html_static_path = ["_static", str(_mathjax_static)]
html_css_files = ["custom.css"]
html_js_files = ["toc-names.js"]   # long API names in the contents wrap at dots and underscores
html_last_updated_fmt = None
html_use_index = False             # no general index: API entries are sections (sidebar, search)
html_domain_indices = False
html_show_sourcelink = False
html_copy_source = False
# the theme's light/dark switch starts in light mode (figures are drawn on white); without a
# default the theme logs "Got invalid theme mode" as a console error on a reader's first visit
html_context = {"default_mode": "light"}
html_theme_options = {
    # no repository links: settings.ini's git_url names a repository that does not exist; each API
    # entry links to its definition on the site's own source pages (docs/source_pages.py)
    "use_repository_button": False,
    "use_source_button": False,
    "use_edit_page_button": False,
    "use_issues_button": False,
    "show_toc_level": 1,             # "on this page" lists the ## sections only (custom.css)
    "home_page_in_toc": True,
    "navigation_with_keys": False,
    "use_download_button": False,    # sources are not copied (html_copy_source = False)
    "extra_footer": f"<p>{_s.get('description', '')}</p>",
}


# --- the reading path -------------------------------------------------------------------------
# Each page's "previous" and "next" links follow the reading path (docs/reading_path.py), as the
# chapters' recaps do, instead of the file order: 04's next page is 30, a detour's leads back to
# the path. docs/stage_nbs.py wrote each page's neighbours into the site manifest.
import html as _html, json as _json

_MANIFEST = _root / "docs" / "_build" / "site_manifest.json"


_PAGES = _json.loads(_MANIFEST.read_text(encoding="utf-8"))["pages"] if _MANIFEST.exists() else {}


def _path_links(app, pagename, templatename, context, doctree):
    pages = _PAGES
    meta = pages.get(pagename)
    if meta is None: return
    for key in ("prev", "next"):
        stem = meta.get(key)
        context[key] = ({"link": f"{stem}.html", "title": _html.escape(pages[stem]["title"])}
                        if stem in pages else None)


def setup(app):
    app.connect("html-page-context", _path_links)
