"""Checks over the built site (docs/_build/html) that need no browser: what a literate site promises.

Run after `bash docs/build.sh`; docs/browser_check.py runs it too (and adds what only a browser can
see: math typeset, the figures' size on the page, line breaks in the contents), and so does
tests/test_site.py. docs/stage_nbs.py writes docs/_build/site_manifest.json: for each page the
`def NAME` / `class NAME` of its notebook's exported cells, read from the source notebook, and its
summary. Each problem has a kind:

* `code`: a chapter page lacks the source of a definition its notebook exports (every exported
  `def`/`class` must appear in one of the page's code cells);
* `duplicate`: an API entry (a show_doc signature) shown twice, on one page or on two pages;
* `repo-link`: a link to (or below) the owner of settings.ini's `git_url` (github.com/minivllm:
  a repository that does not exist), or to nbdev's Quarto site (`doc_host` + `doc_baseurl`);
* `link`: a link inside the site to a page or an anchor that does not exist (the API entries'
  "source" links to the module pages are raw HTML, which Sphinx does not check);
* `figure-png` / `figure-dpi`: an image of the site that is not an 8-bit RGB or RGBA PNG (a
  palette-quantized PNG, a JPEG...), or whose PNG says less than 100 dpi (pHYs) or nothing;
* `summary`: a chapter page without its whole summary (the notebook's `>` paragraph), or
  `summary-stop`: a summary that does not end with a full stop;
* `raw-tex`: TeX shown as text outside code (`$\\frac...$`, `\\(`...`\\)`): math not parsed;
* `api-stub`: an API entry for a name whose code the same page shows (docs/stage_nbs.py turns those
  show_doc entries into anchors on the code: the reader has just read the signature and docstring);
* `recap`: a chapter (00-89) that does not end with a `## Recap` section whose `**Next:**` link is
  the next page on the reading path (docs/reading_path.py); `next`: a page whose "next" link at
  its foot is not that page;
* `figure-first`: a core chapter without a figure (an image, an inline SVG, a step viewer) before
  its first `##` section ends: each core idea is drawn where it is introduced.

Every kind fails. A kind listed in PENDING is printed and fails only with DOCS_STRICT=1 (room to
park one while its notebooks are being fixed): none today.
Usage: python docs/site_check.py   (exit 1 on a failing problem)
"""
import json, os, re, struct, sys, zlib
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import unquote, urlparse

from bs4 import BeautifulSoup

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stage_nbs import defined_names  # noqa: E402  (the names a code cell defines, as show_doc)

DOCS = Path(__file__).resolve().parent
SITE = DOCS / "_build" / "html"
MANIFEST = DOCS / "_build" / "site_manifest.json"
MIN_DPI = 100
PENDING: set[str] = set()   # kinds parked while their notebooks are being fixed


def strict():
    return os.environ.get("DOCS_STRICT") == "1"


def failing(kind):
    return strict() or kind not in PENDING


# --- PNG --------------------------------------------------------------------------------------
def png_info(data):
    """{'w','h','bit','color' ('RGB', 'RGBA', 'palette', 'gray', 'gray+alpha'), 'dpi' (None if no
    pHYs in metres), 'text' (tEXt/iTXt chunks)} of a PNG, or None when `data` is not a PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n": return None
    colors = {0: "gray", 2: "RGB", 3: "palette", 4: "gray+alpha", 6: "RGBA"}
    info, i = {"dpi": None, "text": {}}, 8
    while i + 8 <= len(data):
        n, = struct.unpack(">I", data[i:i + 4])
        kind, body = data[i + 4:i + 8], data[i + 8:i + 8 + n]
        if kind == b"IHDR":
            info["w"], info["h"], info["bit"], ct = struct.unpack(">IIBB", body[:10])
            info["color"] = colors.get(ct, str(ct))
        elif kind == b"pHYs" and len(body) == 9:
            x, y, unit = struct.unpack(">IIB", body)
            if unit == 1: info["dpi"] = round(min(x, y) * 0.0254, 1)
        elif kind == b"tEXt" and b"\0" in body:
            k, v = body.split(b"\0", 1)
            info["text"][k.decode("latin-1")] = v.decode("latin-1")
        elif kind == b"iTXt" and b"\0" in body:
            k, rest = body.split(b"\0", 1)
            try:
                comp, _, rest = rest[0], rest[1], rest[2:]
                _, _, v = rest.split(b"\0", 2)
                info["text"][k.decode("latin-1")] = (zlib.decompress(v) if comp else v).decode()
            except Exception: pass
        elif kind == b"IEND": break
        i += 12 + n
    return info


def min_font_pt(info):
    "The smallest font (pt) the figure's code says it drew (PNG text `min_font_pt`), or None."
    v = (info or {}).get("text", {}).get("min_font_pt")
    try: return float(v) if v is not None else None
    except ValueError: return None


def image_problems(path):
    "[(kind, message)] for one image file of the site."
    data = path.read_bytes()
    info = png_info(data)
    if info is None:
        if path.suffix.lower() == ".svg": return []
        return [("figure-png", "not a PNG")]
    out = []
    if info["color"] not in ("RGB", "RGBA") or info["bit"] != 8:
        out.append(("figure-png", f"{info['color']} PNG, {info['bit']}-bit (want 8-bit RGB(A): "
                                  "no palette quantization)"))
    if info["dpi"] is None: out.append(("figure-dpi", "no dpi in the PNG (pHYs)"))
    elif info["dpi"] < MIN_DPI: out.append(("figure-dpi", f"{info['dpi']:g} dpi < {MIN_DPI}"))
    return out


# --- pages --------------------------------------------------------------------------------------
def load_manifest():
    if not MANIFEST.exists(): return {"pages": {}, "git_url": ""}
    return json.loads(MANIFEST.read_text(encoding="utf-8"))


_SMART = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"',
                        "\u2013": "--", "\u2014": "---", "\u2026": "..."})


def norm(s):
    "Text as a reader sees it, compared loosely: no backticks, Sphinx's smart quotes undone."
    return re.sub(r"\s+", " ", s.replace("`", "").translate(_SMART)).strip()


def where(el):
    "The heading above `el` (a reader's way to find it on the page)."
    h = el.find_previous(["h1", "h2", "h3", "h4"])
    return f"under '{norm(h.get_text()).rstrip('#').strip()[:60]}'" if h else "at the top"


_re_tex = re.compile(r"\$[^$\n]*\\[a-zA-Z]+[^$\n]*\$|\\\(.+?\\\)|\\\[.+?\\\]|\$\$")


def check_site(site=SITE, manifest=None):
    "[(page, kind, message)] of every problem; see the module docstring."
    manifest = manifest or load_manifest()
    pages = manifest.get("pages", {})
    git_url = manifest.get("git_url", "").rstrip("/")
    # the repository's owner on its host (github.com/minivllm): no link to it or below it
    owner = re.sub(r"^https?://", "", git_url).rsplit("/", 1)[0] if git_url.count("/") > 3 else git_url
    bad_hosts = [owner] if owner else []
    # nbdev's links to its Quarto site (settings.ini doc_host + doc_baseurl), which is not this one:
    # docs/stage_nbs.py rewrites them to the local pages
    doc_url = manifest.get("doc_url", "").rstrip("/")
    if doc_url: bad_hosts.append(doc_url)
    probs = []
    html = {p.relative_to(site).as_posix(): p for p in site.rglob("*.html")
            if not p.relative_to(site).parts[0].startswith("_")}
    soups, ids = {}, {}
    for rel, p in html.items():
        text = p.read_text(encoding="utf-8")
        for host in bad_hosts:
            host_ = re.sub(r"^https?://", "", host)
            if host_ in text:
                probs.append((rel, "repo-link", f"{text.count(host_)} link(s)/mention(s) of {host_} "
                                                "(a repository or site that does not exist)"))
        s = BeautifulSoup(text, "html.parser")
        soups[rel] = s
        ids[rel] = {el["id"] for el in s.find_all(id=True)} | {a["name"] for a in s.find_all("a", attrs={"name": True})}
    # links inside the site: the page exists, and so does the anchor
    for rel, s in soups.items():
        base = Path(rel).parent
        for a in s.select("article a[href]"):
            u = urlparse(a["href"])
            if u.scheme or u.netloc or a["href"].startswith(("mailto:", "javascript:")): continue
            target = rel if not u.path else os.path.normpath((base / unquote(u.path)).as_posix())
            if target.endswith("/"): target += "index.html"
            if not (site / target).exists():
                probs.append((rel, "link", f"link to missing {a['href']!r} ({where(a)})")); continue
            if u.fragment and target.endswith(".html") and target in ids and unquote(u.fragment) not in ids[target]:
                probs.append((rel, "link", f"link to missing anchor {a['href']!r} ({where(a)})"))
    # API entries: one per definition, on one page, and none for code the page shows
    entry_pages = defaultdict(list)
    for rel, s in soups.items():
        names, sigs = Counter(), Counter()
        shown = set().union(*(defined_names(pre.get_text())
                              for pre in s.select("div.cell_input pre")))
        for sec in s.select('section[id^="api-"]'):
            h = sec.find(["h2", "h3", "h4", "h5"])
            if h is None: continue
            nm = norm(h.get_text()).rstrip("#").strip()
            if nm in shown:
                probs.append((rel, "api-stub", f"API entry {nm!r} repeats code the page shows"))
            pre = sec.select_one("div.highlight pre")
            sig = norm(pre.get_text()) if pre else ""
            names[nm] += 1
            if sig: sigs[sig] += 1
            # the same entry on two pages: name, signature and docstring alike (a method a later
            # chapter patches again, with its own docstring, is a second definition)
            doc = norm(" ".join(p.get_text() for p in sec.find_all("p", recursive=False)
                                if not p.select_one("a.api-source")))
            entry_pages[(nm, sig, doc)].append(rel)
        for nm, n in names.items():
            if n > 1: probs.append((rel, "duplicate", f"API entry {nm!r} shown {n} times"))
        for sig, n in sigs.items():
            if n > 1 and sig: probs.append((rel, "duplicate", f"signature shown {n} times: {sig[:80]!r}"))
    for (nm, _, _), where_ in entry_pages.items():
        if len(set(where_)) > 1:
            first, *others = sorted(set(where_))
            probs.append((first, "duplicate", f"API entry {nm!r} also on {', '.join(others)}"))
    # chapters: the code they export, their summary
    for stem, meta in pages.items():
        rel = meta["page"]
        s = soups.get(rel)
        if s is None:
            probs.append((rel, "link", "page missing from the site")); continue
        code = "\n".join(pre.get_text() for pre in s.select("div.cell_input pre, div.cell_input code"))
        for d in meta.get("exports", []):
            kw, name = d.rsplit(" ", 1)
            if not re.search(r"(^|\n)[ \t]*" + r"\s+".join(map(re.escape, kw.split())) + r"\s+"
                             + re.escape(name) + r"\b", code):
                probs.append((rel, "code", f"the exported `{d}` is not shown in a code cell"))
        if stem != "index" and meta.get("summary"):
            box = s.select_one(".chapter-summary")
            shown = norm(box.get_text()) if box else ""
            if shown != norm(meta["summary"]):
                probs.append((rel, "summary", f"summary not shown whole: {shown[:60]!r}"))
            elif not shown.endswith("."):
                probs.append((rel, "summary-stop", f"summary does not end with a full stop: ...{shown[-50:]!r}"))
        # raw TeX in prose: dollars or \( \) left as text (code and math elements excluded)
        art = s.select_one("article")
        if art is not None:
            for el in art.find_all(string=_re_tex):
                if el.find_parent(["pre", "code", "script", "style"]) is None and \
                        el.find_parent(class_="math") is None:
                    probs.append((rel, "raw-tex", f"TeX shown as text: {norm(str(el))[:80]!r}"))
    probs += reading_problems(soups, pages)
    # images on the pages (figures of the notebooks' outputs, images of the prose)
    seen = set()
    for rel, s in soups.items():
        for img in s.select("article img[src]"):
            u = urlparse(img["src"])
            if u.scheme == "data" or img["src"].startswith("data:"):
                probs.append((rel, "figure-png", f"inline data: image {where(img)}")); continue
            if u.scheme or u.netloc: continue
            f = site / os.path.normpath((Path(rel).parent / unquote(u.path)).as_posix())
            if not f.exists() or (rel, f) in seen: continue
            seen.add((rel, f))
            for kind, msg in image_problems(f):
                probs.append((rel, kind, f"{f.name} ({where(img)}): {msg}"))
    return probs


def page_stem(href):
    "The page a link goes to (`30_worked_examples.html#e8` -> '30_worked_examples')."
    return Path(unquote(urlparse(href).path)).stem


def first_section_has_figure(soup):
    "True when a figure comes before the end of the page's first `##` section."
    top = soup.select_one("article section")
    if top is None: return False
    first = top.find("section", recursive=False)
    figure = lambda el: el.select_one("div.cell_output img, svg, .mv-step-viewer") is not None
    for el in top.children:
        if getattr(el, "name", None) is None: continue
        if figure(el): return True
        if el is first: return False
    return False


def reading_problems(soups, pages):
    """The reading path (docs/reading_path.py): recaps, the next links, a figure early on each
    core chapter. `pages`: the site manifest's pages."""
    probs = []
    for stem, meta in pages.items():
        rel, soup = meta["page"], soups.get(meta["page"])
        if soup is None: continue
        foot = soup.select_one("a.right-next")
        if meta.get("next") and (foot is None or page_stem(foot["href"]) != meta["next"]):
            probs.append((rel, "next", f"the page's next link goes to "
                          f"{page_stem(foot['href']) if foot else None}, not {meta['next']}"))
        if meta.get("role") == "core" and not first_section_has_figure(soup):
            probs.append((rel, "figure-first", "no figure before the first ## section ends"))
        if meta.get("role") not in ("core", "detour"): continue
        top = soup.select_one("article section")
        last = top.find_all("section", recursive=False)[-1:] if top else []
        recap = last[0] if last and last[0].get("id") == "recap" else None
        if recap is None:
            probs.append((rel, "recap", "the chapter does not end with a ## Recap section")); continue
        nxt = next((p for p in recap.find_all("p") if norm(p.get_text()).startswith("Next:")), None)
        link = nxt.find("a", href=True) if nxt else None
        if link is None or page_stem(link["href"]) != meta.get("next"):
            probs.append((rel, "recap", f"the recap's Next link goes to "
                          f"{page_stem(link['href']) if link else None}, not {meta.get('next')}"))
    return probs


def report(probs, out=print):
    "Print the problems; the number that fail (not PENDING, or DOCS_STRICT=1)."
    n_fail = 0
    for page, kind, msg in sorted(probs, key=lambda p: (not failing(p[1]), p[0], p[1])):
        fail = failing(kind)
        n_fail += fail
        out(f"  {'ERROR' if fail else 'PENDING'} {page} [{kind}]: {msg}")
    return n_fail


def main():
    if not (SITE / "index.html").exists():
        print(f"site_check: {SITE}/index.html missing: run `bash docs/build.sh` first"); return 1
    probs = check_site()
    n_fail = report(probs)
    kinds = Counter(k for _, k, _ in probs)
    print(f"site_check: {'FAILED' if n_fail else 'OK'}: {n_fail} error(s), "
          f"{len(probs) - n_fail} pending (parked kinds: {', '.join(sorted(PENDING)) or 'none'}; "
          f"DOCS_STRICT=1 fails on them); by kind: {dict(kinds)}")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
