"""Open every page of the built docs site in headless Chromium, as a reader at a 1440-pixel window.

Run after `bash docs/build.sh` (this script builds nothing). It serves docs/_build/html on
127.0.0.1 (a local http.server thread, stopped at the end) and drives Chromium through the
DevTools protocol over a pipe (`--remote-debugging-pipe`: JSON messages on file descriptors 3
and 4, so no extra Python package is needed). Every page of the site is loaded in a 1440x900
viewport and fails the check when:

* the browser logs a console error or an uncaught exception, or a request to the site fails
  (an HTTP error, a file that does not load);
* an image does not load (naturalWidth 0), or the page has no <h1> or (nearly) no text;
* a code block -- a notebook cell's code or a code block of the prose -- is wider than its box
  and scrolls sideways (code lines are at most 100 characters, and the content column is made
  wide enough for them in _static/custom.css), or the whole page scrolls sideways;
* a chapter page shows no cell output at all;
* Chinese text is drawn with no CJK-capable font, or the page's font stack names none.

The literate-site checks (each printed with its kind; kinds in site_check.PENDING -- figure
files and fonts, summaries' full stops: notebook fixes -- are printed as PENDING and fail only with
DOCS_STRICT=1):

* docs/site_check.py over the HTML files, run first, even without a browser: each chapter shows
  the source of every `def`/`class` its notebook exports, no API entry (signature) twice, no link
  to settings.ini's `git_url` (a repository that does not exist), no broken link inside the site
  (the API entries' "source" links go to the module pages, source/*.html), every image an 8-bit
  RGB(A) PNG of at least 100 dpi, every chapter's summary whole and ending with a full stop;
* math typeset: every `.math` element rendered by MathJax (served from the site), no TeX left as
  text outside code;
* figure text: the smallest text of each figure as shown, font (pt) x dpi / 72 x shown width /
  saved width (an inline SVG: its font size times the scale it is drawn at), at least 9 px (exact when the PNG records `min_font_pt` in a text chunk; else the
  figure fails when even 9-pt text would show under 9 px);
* the contents (chapter list, "on this page") never break a name mid-word (_static/toc-names.js
  lets names break after dots and underscores), and "on this page" lists the `##` sections only;
* the reading path (site_check, from the HTML): each chapter ends with a `## Recap` whose
  `**Next:**` link, like the page's own "next" link, is the next page on docs/reading_path.py's
  path; each core chapter shows a figure before its first `##` section ends; no API entry
  repeats a definition the page shows as code.

Then the search page must find `allocate_slots`, the index's top header must have a search field
(the theme's, besides the sidebar's) that opens the search box, and every step viewer (the
interactive `StepViewer` of chapters 04, 22 and 30) must step through its run -- the next button, the arrow keys --
with its block pool changing. Screenshots of a few pages (the index, the first chapter of each
part, the first module source page, or the pages named in DOCS_SHOTS=a,b; top of page, first
figure, widest code cell, recap) go to docs/_build/screenshots/ for a person to look at. Outputs
(printed text) that scroll sideways are listed as notes, not failures.

Exit status 0 when all pages pass, 1 otherwise. Without a Chromium binary it prints SKIP and
exits 0 -- except under CI (CI=true) or with DOCS_BROWSER_REQUIRED=1, where a missing browser is
an error (.ci/run installs it: `apt-get install -y chromium fonts-noto-cjk`).
Usage: python docs/browser_check.py [PAGE.html ...]   (default: every page)
"""
import base64, fcntl, functools, http.server, json, os, re, shutil, signal, sys, tempfile
import threading, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import site_check  # noqa: E402  (the checks that need no browser)
from urllib.parse import unquote, urljoin, urlparse

DOCS = Path(__file__).resolve().parent
SITE = DOCS / "_build" / "html"
SHOTS = DOCS / "_build" / "screenshots"
WIDTH, HEIGHT = 1440, 900
SEARCH_WORD = "allocate_slots"
MIN_TEXT_PX = 9       # the smallest figure text a reader at 1440 px should have to read
TIMEOUT = 60  # seconds for one page to load

CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--mute-audio", "--disable-extensions",
                f"--window-size={WIDTH},{HEIGHT}",
                # the site is checked offline: any host but the local server fails at once
                # (MathJax from its CDN, for instance, simply does not load; see IGNORED below)
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


def find_browser():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        p = shutil.which(name)
        if p: return p


class CDPError(Exception): pass


class Chrome:
    "Chromium with the DevTools protocol on a pipe: `send` a command, `wait_event` for an event."
    def __init__(self, browser, profile):
        cmd_r, cmd_w = os.pipe()    # we write commands, Chromium reads them on fd 3
        res_r, res_w = os.pipe()    # Chromium writes replies and events on fd 4
        self.log = open(Path(profile) / "chromium.log", "wb")
        hi = lambda fd: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)  # out of the way of 3 and 4
        a, b, lg = hi(cmd_r), hi(res_w), hi(self.log.fileno())
        actions = [(os.POSIX_SPAWN_DUP2, a, 3), (os.POSIX_SPAWN_DUP2, b, 4),
                   (os.POSIX_SPAWN_DUP2, lg, 1), (os.POSIX_SPAWN_DUP2, lg, 2),
                   (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
        argv = [browser, *CHROME_FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}",
                "about:blank"]
        self.pid = os.posix_spawn(browser, argv, os.environ, file_actions=actions)
        for fd in (cmd_r, res_w, a, b, lg): os.close(fd)
        self.w, self.r = cmd_w, res_r
        self.next_id, self.replies, self.events = 0, {}, []
        self.cond, self.alive = threading.Condition(), True
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        buf = b""
        while True:
            chunk = os.read(self.r, 1 << 16)
            if not chunk: break
            buf += chunk
            *msgs, buf = buf.split(b"\0")
            with self.cond:
                for m in msgs:
                    msg = json.loads(m)
                    if "id" in msg: self.replies[msg["id"]] = msg
                    else: self.events.append(msg)
                self.cond.notify_all()
        with self.cond:
            self.alive = False
            self.cond.notify_all()

    def send(self, method, params=None, session=None, timeout=TIMEOUT):
        with self.cond:
            self.next_id += 1
            i = self.next_id
        msg = {"id": i, "method": method, "params": params or {}}
        if session: msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data: data = data[os.write(self.w, data):]
        with self.cond:
            if not self.cond.wait_for(lambda: i in self.replies or not self.alive, timeout):
                raise TimeoutError(f"{method}: no reply from Chromium in {timeout}s")
            if i not in self.replies: raise CDPError(f"{method}: Chromium exited ({self.tail()})")
            r = self.replies.pop(i)
        if "error" in r: raise CDPError(f"{method}: {r['error']}")
        return r.get("result", {})

    def wait_event(self, method, session, since, timeout=TIMEOUT):
        "The first event `method` of `session` after index `since` of the event list."
        def find():
            return next((e for e in self.events[since:]
                         if e["method"] == method and e.get("sessionId") == session), None)
        with self.cond:
            if not self.cond.wait_for(lambda: find() or not self.alive, timeout):
                raise TimeoutError(f"no {method} in {timeout}s")
            e = find()
            if e is None: raise CDPError(f"waiting for {method}: Chromium exited ({self.tail()})")
            return e

    def tail(self):
        self.log.flush()
        return (Path(self.log.name).read_text(errors="replace")[-400:]).strip()

    def close(self):
        try: self.send("Browser.close", timeout=10)
        except Exception: pass
        for _ in range(50):
            if os.waitpid(self.pid, os.WNOHANG)[0]: break
            time.sleep(0.1)
        else:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.w)
        self.log.close()


class Log(http.server.SimpleHTTPRequestHandler):
    "Serves the site and records (path, status) of every request."
    requests, lock = [], threading.Lock()

    def log_message(self, *a): pass

    def send_response(self, code, message=None):
        with self.lock: self.requests.append((unquote(urlparse(self.path).path), code))
        super().send_response(code, message)


# Run in the page once it has loaded: makes every image load now (lazy ones too), waits for
# them and for the fonts, then measures what a reader would trip on.
PAGE_JS = r"""(async () => {
  const imgs = Array.from(document.images);
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => i.complete ? 0 : new Promise(r => {
    i.addEventListener('load', r); i.addEventListener('error', r); setTimeout(r, 5000); })));
  await document.fonts.ready;
  const art = document.querySelector('article') || document.body;
  const kind = el => el.closest('.cell_output') ? 'output'
                   : el.closest('.cell_input') ? 'code cell' : 'code block';
  const wide = Array.from(art.querySelectorAll('pre')).filter(
      p => p.scrollWidth > p.clientWidth + 1 && p.offsetParent !== null).map(p => {
    const lines = p.innerText.split('\n');
    const longest = lines.reduce((a, b) => b.length > a.length ? b : a, '');
    const r = p.getBoundingClientRect();
    return {kind: kind(p), over: p.scrollWidth - p.clientWidth, box: p.clientWidth,
            chars: longest.length, line: longest.slice(0, 110), top: r.top + window.scrollY};
  });
  // the longest code-cell line that fits, to screenshot the widest code a reader sees
  let widest = null;
  art.querySelectorAll('.cell_input pre').forEach(p => {
    const n = Math.max(...p.innerText.split('\n').map(l => l.length));
    if (!widest || n > widest.chars) {
      const r = p.getBoundingClientRect();
      widest = {chars: n, top: r.top + window.scrollY, height: r.height, box: p.clientWidth};
    }
  });
  const fig = art.querySelector('.cell_output img, .cell_output svg, .mv-step-viewer');
  const recap = document.getElementById('recap');
  const fr = fig ? fig.getBoundingClientRect() : null;
  // the first element whose own text holds Chinese characters, marked for the font check
  const walker = document.createTreeWalker(art, NodeFilter.SHOW_TEXT);
  let cjk = null, n;
  while ((n = walker.nextNode())) {
    if (/[\u4e00-\u9fff]/.test(n.nodeValue) && n.parentElement) {
      cjk = n.parentElement; cjk.setAttribute('data-cjk-check', '1'); break; }
  }
  // math: MathJax (served from the site, _static/mathjax) typesets every .math element; TeX left
  // as text means it did not (not loaded, or a $...$ myst did not parse)
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    try { await MathJax.startup.promise; } catch (e) {} }
  const maths = Array.from(art.querySelectorAll('.math'));
  const rawMath = maths.filter(m => !m.querySelector('mjx-container')).map(
      m => m.textContent.trim().slice(0, 80));
  const texWalker = document.createTreeWalker(art, NodeFilter.SHOW_TEXT);
  const rawTex = [];
  while ((n = texWalker.nextNode())) {
    const t = n.nodeValue;
    if (!/\\\(|\\\[|\$\$|\$[^$\n]*\\[a-zA-Z]+[^$\n]*\$/.test(t)) continue;
    const p = n.parentElement;
    if (p && !p.closest('pre, code, script, style, mjx-container, .math')) rawTex.push(t.trim().slice(0, 80));
  }
  // figures as shown: the displayed width against the image's own (its scale on the page)
  const figs = Array.from(art.querySelectorAll('img')).filter(i => i.naturalWidth > 0).map(i => {
    const r = i.getBoundingClientRect();
    const h = i.closest('section');
    const head = h ? h.querySelector('h1, h2, h3, h4') : null;
    return {src: i.getAttribute('src'), natural: i.naturalWidth, shown: r.width,
            under: head ? head.innerText.replace(/#$/, '').trim().slice(0, 60) : ''};
  });
  // inline SVG figures (the flowchart): their smallest text as shown, font size in the SVG's
  // units times the scale the page draws it at
  const svgText = Array.from(art.querySelectorAll('.cell_output svg')).map(svg => {
    const vb = svg.viewBox && svg.viewBox.baseVal, w = svg.getBoundingClientRect().width;
    const sizes = Array.from(svg.querySelectorAll('text'))
      .map(t => parseFloat(getComputedStyle(t).fontSize)).filter(x => x > 0);
    return {id: svg.id || '?', px: sizes.length ? Math.min(...sizes) * (vb && vb.width ? w / vb.width : 1)
                                                 : null};
  });
  // the contents (chapter list, "on this page"): a line may break after a space, a dot, an
  // underscore, a slash, a comma, a dash or an opening bracket -- never inside a word
  const badBreaks = [];
  const range = document.createRange();
  document.querySelectorAll('.bd-sidebar-secondary nav a, .bd-sidebar-primary nav a').forEach(a => {
    if (a.offsetParent === null) return;
    const w = document.createTreeWalker(a, NodeFilter.SHOW_TEXT);
    let prev = null, prevTop = null, t;
    while ((t = w.nextNode())) {
      for (let i = 0; i < t.length; i++) {
        const ch = t.nodeValue[i];
        if (/\s/.test(ch)) { prev = ' '; continue; }
        range.setStart(t, i); range.setEnd(t, i + 1);
        const r = range.getClientRects()[0];
        if (!r || r.width === 0) continue;
        if (prevTop !== null && r.top > prevTop + 2 && !/[\s._\/,(\u00b7:-]/.test(prev))
          badBreaks.push(a.textContent.trim().slice(0, 60) + ' (before "' + t.nodeValue.slice(i, i + 8) + '")');
        prevTop = r.top; prev = ch;
      }
    }
  });
  // "on this page" lists the ## sections only (custom.css): every entry that can show is an h2's,
  // even with every entry marked active, as the theme marks the section scrolled to
  const tocItems = Array.from(document.querySelectorAll(
    '.bd-sidebar-secondary nav li, .bd-sidebar-secondary nav a'));
  const wasActive = tocItems.map(li => li.classList.contains('active'));
  tocItems.forEach(li => li.classList.add('active'));
  const tocDeep = Array.from(document.querySelectorAll('.bd-sidebar-secondary nav a[href^="#"]'))
    .filter(a => a.offsetParent !== null).filter(a => {
      const el = document.getElementById(decodeURIComponent(a.getAttribute('href').slice(1)));
      return !(el && el.tagName === 'SECTION' && el.querySelector(':scope > h2'));
    }).map(a => a.textContent.trim().slice(0, 60));
  tocItems.forEach((li, i) => { if (!wasActive[i]) li.classList.remove('active'); });
  const h1 = document.querySelector('h1');
  return {
    toc_deep: tocDeep, svg_text: svgText,
    maths: maths.length, raw_math: rawMath, raw_tex: rawTex, figs: figs, bad_breaks: badBreaks,
    h1: h1 ? h1.innerText.trim() : null,
    text: (art.innerText || '').trim().length,
    n_img: imgs.length,
    bad_img: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
    wide: wide,
    page_over: document.documentElement.scrollWidth - window.innerWidth,
    outputs: art.querySelectorAll('.cell_output').length,
    font: getComputedStyle(document.body).fontFamily,
    cjk: cjk ? cjk.textContent.trim().slice(0, 40) : null,
    fig: fr ? [fr.top + window.scrollY, fr.height] : null,
    recap: recap ? recap.getBoundingClientRect().top + window.scrollY : null,
    widest: widest,
    height: document.documentElement.scrollHeight,
  };
})()"""

CJK_FONT = re.compile(r"CJK|Noto Sans SC|Noto Serif SC|PingFang|Hiragino|YaHei|SimHei|SimSun|"
                      r"Source Han|WenQuanYi|Droid Sans Fallback|Heiti|Songti", re.I)


def is_local(url):
    return urlparse(url).hostname in ("127.0.0.1", "localhost")


class Checker:
    def __init__(self, chrome, base):
        self.c, self.base = chrome, base
        t = self.c.send("Target.createTarget", {"url": "about:blank"})
        self.s = self.c.send("Target.attachToTarget",
                             {"targetId": t["targetId"], "flatten": True})["sessionId"]
        for dom in ("Page", "Runtime", "Log", "Network", "DOM", "CSS"):
            self.send(f"{dom}.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})

    def send(self, method, params=None, timeout=TIMEOUT):
        return self.c.send(method, params, session=self.s, timeout=timeout)

    def load(self, url):
        since = len(self.c.events)
        self.send("Page.navigate", {"url": url})
        self.c.wait_event("Page.loadEventFired", self.s, since)
        return since

    def evaluate(self, expr, timeout=TIMEOUT):
        r = self.send("Runtime.evaluate", {"expression": expr, "awaitPromise": True,
                                           "returnByValue": True}, timeout=timeout)
        if "exceptionDetails" in r: raise CDPError(f"script failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def problems_logged(self, since):
        "Console errors, uncaught exceptions and failed requests to the site since event `since`."
        errs, notes, urls = [], [], {}
        for e in self.c.events[since:]:
            if e.get("sessionId") != self.s: continue
            m, p = e["method"], e.get("params", {})
            if m == "Network.requestWillBeSent": urls[p["requestId"]] = p["request"]["url"]
            elif m == "Network.responseReceived":
                st, u = p["response"]["status"], p["response"]["url"]
                if st >= 400 and is_local(u) and not u.endswith("/favicon.ico"):
                    errs.append(f"HTTP {st} for {urlparse(u).path}")
            elif m == "Network.loadingFailed":
                u = urls.get(p["requestId"], "?")
                if is_local(u) and not p.get("canceled"):
                    errs.append(f"request failed ({p.get('errorText')}): {urlparse(u).path}")
                elif not is_local(u): notes.append(f"offline, not loaded: {u}")
            elif m == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                errs.append("uncaught exception: " + (d.get("exception", {}).get("description")
                                                      or d.get("text", "?")).splitlines()[0])
            elif m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                args = " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
                errs.append(f"console.{p['type']}: {args[:200]}")
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                en = p["entry"]
                u = en.get("url", "")
                if u and not is_local(u): notes.append(f"offline, not loaded: {u}")
                elif not u.endswith("/favicon.ico") and en.get("source") != "network":
                    errs.append(f"console error ({en.get('source')}): {en['text'][:200]}")
                # network errors of the site itself are reported from Network.* above
        return errs, sorted(set(notes))

    def cjk_fonts(self):
        "Families Chromium actually used to draw the element marked by PAGE_JS (CSS domain)."
        doc = self.send("DOM.getDocument", {"depth": 0})
        node = self.send("DOM.querySelector", {"nodeId": doc["root"]["nodeId"],
                                               "selector": "[data-cjk-check]"})["nodeId"]
        if not node: return None
        fonts = self.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
        return [f["familyName"] for f in fonts]

    def screenshot(self, path, top):
        "The window as a reader sees it, scrolled so that page position `top` is near its top."
        self.evaluate(f"window.scrollTo(0, {max(0, int(top))}); "
                      "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        r = self.send("Page.captureScreenshot", {"format": "png"})
        path.write_bytes(base64.b64decode(r["data"]))


def chapter_pages():
    nbs = DOCS / "_nbs"
    if not nbs.exists(): return set()
    return {p.stem + ".html" for p in nbs.glob("*.ipynb") if p.stem != "index"}


@functools.lru_cache(maxsize=None)
def shot_pages():
    """Pages to screenshot: DOCS_SHOTS (comma-separated page names) or the index, the first
    chapter of each part (from docs/_build/site_manifest.json) and the first module source page."""
    if os.environ.get("DOCS_SHOTS"): return tuple(os.environ["DOCS_SHOTS"].split(","))
    pages, firsts = site_check.load_manifest().get("pages", {}), {}
    for stem, meta in pages.items():
        if meta.get("part"): firsts.setdefault(meta["part"], stem)
    src = sorted(p for p in SITE.glob("source/*.html") if p.stem != "index")
    return ("index", *firsts.values(), *(["source/" + src[0].stem] if src else []))


def figure_text(page, f):
    """The smallest text of a figure as the page shows it: font (pt) x dpi / 72 x displayed width /
    saved width. With the font size recorded in the PNG (text chunk `min_font_pt`) that is exact;
    without it, the figure fails when even 9-pt text would show under MIN_TEXT_PX (a low dpi or a
    figure shrunk to fit), and passes with the font size its text needs."""
    u = urlparse(f["src"])
    if u.scheme or u.netloc: return None
    path = SITE / os.path.normpath((Path(page).parent / unquote(u.path)).as_posix())
    if not path.exists() or not f["natural"]: return None
    info = site_check.png_info(path.read_bytes())
    if info is None: return None
    scale = f["shown"] / f["natural"]
    where = f"{path.name} (under '{f['under']}', shown at {scale:.0%} of its {f['natural']} px)"
    if info["dpi"] is None:
        return f"{where}: no dpi in the PNG, so its text size cannot be computed"
    px_per_pt = info["dpi"] / 72 * scale
    pt = site_check.min_font_pt(info)
    if pt is not None:
        px = pt * px_per_pt
        return None if px >= MIN_TEXT_PX else (
            f"{where}: its smallest text ({pt:g} pt at {info['dpi']:g} dpi) shows at {px:.1f} px "
            f"< {MIN_TEXT_PX}")
    if 9 * px_per_pt < MIN_TEXT_PX:
        return (f"{where}: at {info['dpi']:g} dpi even 9-pt text shows at {9 * px_per_pt:.1f} px "
                f"< {MIN_TEXT_PX}; its text needs {MIN_TEXT_PX / px_per_pt:.1f} pt")
    return None


def check_page(ck, page, chapters):
    errors, notes, pending = [], [], []
    start = len(Log.requests)
    since = ck.load(urljoin(ck.base, page))
    r = ck.evaluate(PAGE_JS)
    logged, offline = ck.problems_logged(since)
    errors += logged
    notes += offline
    for path, code in Log.requests[start:]:  # what the browser did not report itself
        if code >= 400 and path != "/favicon.ico" and f"HTTP {code} for {path}" not in errors:
            errors.append(f"the server answered HTTP {code} for {path}")
    if page in chapters or page == "index.html":  # Sphinx's own pages (genindex) may be empty
        if not r["h1"]: errors.append("no <h1> in the rendered page")
        if r["text"] < 40: errors.append(f"the article is (nearly) empty ({r['text']} characters)")
    for src in r["bad_img"]: errors.append(f"<img src={src!r}> did not load")
    for w in r["wide"]:
        msg = (f"{w['kind']} scrolls sideways by {w['over']}px (box {w['box']}px, longest line "
               f"{w['chars']} chars): {w['line']!r}")
        (notes if w["kind"] == "output" else errors).append(msg)
    if r["page_over"] > 0: errors.append(f"the whole page scrolls sideways by {r['page_over']}px")
    if page in chapters and r["outputs"] == 0: errors.append("a chapter page with no cell output")
    if not CJK_FONT.search(r["font"]): errors.append(f"no CJK font in the font stack: {r['font']}")
    used = None
    if r["cjk"]:
        used = ck.cjk_fonts() or []
        if not any(CJK_FONT.search(f) for f in used):
            errors.append(f"Chinese text {r['cjk']!r} drawn with {used or 'no font'}: no CJK font "
                          "installed? (apt-get install fonts-noto-cjk)")
    for m in r["raw_math"]: errors.append(f"math not typeset (raw TeX shown): {m!r}")
    for t in r["raw_tex"]: errors.append(f"TeX shown as text: {t!r}")
    for b in r["bad_breaks"]: errors.append(f"contents entry broken mid-word: {b}")
    for t in r["toc_deep"]: errors.append(f"'on this page' lists a non-## entry: {t!r}")
    for f in r["figs"]:
        msg = figure_text(page, f)
        if msg: pending.append(("figure-font", msg))
    for f in r["svg_text"]:
        if f["px"] is not None and f["px"] < MIN_TEXT_PX:
            pending.append(("figure-font", f"inline SVG {f['id']}: its smallest text shows at "
                                           f"{f['px']:.1f} px < {MIN_TEXT_PX}"))
    for kind, msg in pending:
        (errors if site_check.failing(kind) else notes).append(
            msg if site_check.failing(kind) else f"PENDING [{kind}] {msg}")
    stem = Path(page).with_suffix("").as_posix().replace("/", "-")
    if Path(page).with_suffix("").as_posix() in shot_pages():
        SHOTS.mkdir(parents=True, exist_ok=True)
        ck.screenshot(SHOTS / f"{stem}.png", 0)
        if r["fig"]: ck.screenshot(SHOTS / f"{stem}-figure.png", r["fig"][0] - 250)
        if r["widest"]: ck.screenshot(SHOTS / f"{stem}-code.png", r["widest"]["top"] - 150)
        if r["recap"]: ck.screenshot(SHOTS / f"{stem}-recap.png", r["recap"] - 100)
    print(f"  {page}: {r['text']} chars, {r['n_img']} img, {r['outputs']} outputs, widest code "
          f"line {r['widest']['chars'] if r['widest'] else 0} chars in a "
          f"{r['widest']['box'] if r['widest'] else 0}px box"
          + (f", CJK drawn with {', '.join(used)}" if used else "")
          + ("" if not errors else f"  -- {len(errors)} ERROR(S)"), flush=True)
    return errors, notes


def check_search(ck, word=SEARCH_WORD):
    "Sphinx's client-side search (searchindex.js) must list at least one page for `word`."
    since = ck.load(urljoin(ck.base, f"search.html?q={word}"))
    js = ("(() => { const l = document.querySelectorAll('#search-results ul.search li, ul.search li');"
          " const s = document.querySelector('#search-results p, .search-summary');"
          " return {n: l.length, summary: s ? s.innerText : '',"
          " first: Array.from(l).slice(0, 3).map(x => x.innerText.split('\\n')[0])}; })()")
    deadline, r = time.time() + 30, {"n": 0}
    while time.time() < deadline:
        r = ck.evaluate(js)
        if "found" in r["summary"].lower() or "did not match" in r["summary"].lower(): break
        time.sleep(0.3)
    errs, _ = ck.problems_logged(since)
    print(f"  search.html?q={word}: {r['n']} result(s) {r.get('first', [])}", flush=True)
    if not r["n"]: errs.append(f"search for {word!r} found nothing ({r.get('summary', '')!r})")
    return errs


def check_step_viewers(ck, page):
    """Every step viewer on `page` (chapter 22's `step_viewer`, an HTML output) steps through its
    run in the browser: the next button and the arrow keys move the step, and the block pool it
    shows changes somewhere along the run."""
    since = ck.load(urljoin(ck.base, page))
    js = ("(() => Array.from(document.querySelectorAll('.mv-step-viewer')).map(root => {"
          " const pool = () => Array.from(root.querySelectorAll('.mv-sv-block'))"
          "   .map(b => (b.dataset.state || '?')[0]).join('');"
          " const n = +root.dataset.numSteps, seen = [root.dataset.step + ':' + pool()];"
          " root.querySelector('.mv-sv-next').click(); seen.push(root.dataset.step + ':' + pool());"
          " root.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight'}));"
          " seen.push(root.dataset.step + ':' + pool());"
          " for (let k = 3; k < n; k++) { root.querySelector('.mv-sv-next').click();"
          "   seen.push(root.dataset.step + ':' + pool()); }"
          " return {n: n, steps: seen.slice(0, 3).map(x => x.split(':')[0]),"
          " pools: new Set(seen.map(x => x.split(':')[1])).size}; }))()")
    viewers = ck.evaluate(js)
    errs, _ = ck.problems_logged(since)
    print(f"  {page} step viewers: {viewers}", flush=True)
    if not viewers: errs.append("the page's step viewer did not render")
    for i, v in enumerate(viewers):
        if v["n"] >= 3 and v["steps"] != ["0", "1", "2"]:
            errs.append(f"step viewer {i}: the next button and the arrow key do not step: {v}")
        if v["pools"] < 2: errs.append(f"step viewer {i}: the pool never changes: {v}")
    return errs


def check_header_search(ck, page="index.html"):
    "The page's top header has a search field (besides the sidebar's); a click opens the search."
    since = ck.load(urljoin(ck.base, page))
    js = ("(() => { const b = Array.from("
          "   document.querySelectorAll('.bd-header .search-button-field'))"
          "   .find(x => x.getBoundingClientRect().width > 0);"
          " if (!b) return {button: false};"
          " const r = b.getBoundingClientRect(); b.click();"
          " const d = document.querySelector('#pst-search-dialog, .search-button__wrapper');"
          " const i = d && d.querySelector('input[name=q]');"
          " return {button: r.width > 0 && r.height > 0, top: r.top,"
          " open: !!(d && (d.open || d.classList.contains('show'))), input: !!i,"
          " focused: !!i && document.activeElement === i}; })()")
    r = ck.evaluate(js)
    errs, _ = ck.problems_logged(since)
    print(f"  {page} header search: {r}", flush=True)
    if not r.get("button"): errs.append("no visible search field in the page's top header")
    elif not (r.get("open") and r.get("input")): errs.append(f"the header's search field opens no "
                                                             f"search box: {r}")
    elif r.get("top", 1e9) > 120: errs.append(f"the header's search field is not at the top: {r}")
    return errs


def all_pages():
    "Every page: the chapters and Sphinx's own at the top, and the module source pages."
    top = sorted(p.name for p in SITE.glob("*.html") if p.name != "search.html")
    return top + sorted(f"source/{p.name}" for p in SITE.glob("source/*.html"))


def main(pages):
    if not (SITE / "index.html").exists():
        print(f"browser_check: {SITE}/index.html missing: run `bash docs/build.sh` first"); return 1
    # the checks over the HTML files (code shown, one entry per definition, no link to a missing
    # repository, figure files, summaries): docs/site_check.py, with or without a browser
    static = site_check.check_site()
    print(f"browser_check: docs/site_check.py: {len(static)} problem(s)", flush=True)
    browser = find_browser()
    if not browser:
        required = os.environ.get("DOCS_BROWSER_REQUIRED") == "1" or os.environ.get("CI") == "true"
        n_static = site_check.report(static)
        print("browser_check: " + ("ERROR" if required else "SKIP") + ": no chromium found "
              "(apt-get update && apt-get install -y chromium fonts-noto-cjk)"
              + (f"; docs/site_check.py: {n_static} error(s)" if n_static else ""))
        return 1 if required or n_static else 0
    pages = pages or all_pages()
    chapters = chapter_pages()
    handler = functools.partial(Log, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/"
    print(f"browser_check: {browser}, {WIDTH}x{HEIGHT}, {len(pages)} page(s) + search on {base}",
          flush=True)
    failures, all_notes, start = {}, {}, time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="docs-chromium-") as profile:
            chrome = Chrome(browser, profile)
            try:
                try: ck = Checker(chrome, base)
                except (TimeoutError, CDPError) as e:
                    print(f"browser_check: ERROR: Chromium did not start a page: {e}\n"
                          f"{chrome.tail()}", flush=True)
                    return 1
                for page in pages:
                    if not (SITE / page).exists():
                        failures[page] = ["not in the built site"]; continue
                    try: errs, notes = check_page(ck, page, chapters)
                    except (TimeoutError, CDPError) as e:
                        errs, notes = [f"{type(e).__name__}: {e}"], []
                    if errs: failures[page] = errs
                    if notes: all_notes[page] = notes
                try: errs = check_search(ck)
                except (TimeoutError, CDPError) as e: errs = [f"{type(e).__name__}: {e}"]
                if errs: failures["search.html"] = errs
                for page in [p for p in pages if not p.startswith("source/")
                             and "mv-step-viewer" in (SITE / p).read_text()]:
                    try: errs = check_step_viewers(ck, page)
                    except (TimeoutError, CDPError) as e: errs = [f"{type(e).__name__}: {e}"]
                    if errs: failures.setdefault(page, []).extend(errs)
                try: errs = check_header_search(ck)
                except (TimeoutError, CDPError) as e: errs = [f"{type(e).__name__}: {e}"]
                if errs: failures["index.html (header search)"] = errs
            finally:
                chrome.close()
    finally:
        httpd.shutdown(); httpd.server_close(); t.join(timeout=5)
    for page, notes in all_notes.items():
        for n in notes: print(f"  note {page}: {n}")
    for page, errs in failures.items():
        for e in errs: print(f"  ERROR {page}: {e}")
    n_static = site_check.report(static)
    if n_static: failures["site_check"] = ["see above"] * n_static
    n_err = sum(map(len, failures.values()))
    print(f"browser_check: {'FAILED' if failures else 'OK'}: {len(pages) + 1} pages, "
          f"{n_err} error(s) in {time.time() - start:.0f}s; screenshots in "
          f"{SHOTS.relative_to(DOCS.parent)}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
