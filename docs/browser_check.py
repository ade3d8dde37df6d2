"""Open the built docs site in headless Chromium and fail if a page is empty or a figure is broken.

Run after `bash docs/build.sh` (this script builds nothing). It serves docs/_build/html on
127.0.0.1 (a local http.server thread, stopped at the end), then for the index and two chapter
pages (by default the first chapter and the chapter with the most figures; or the pages given on
the command line, e.g. `00_request.html`):

* `chromium --dump-dom`: the rendered DOM must have an <h1> and real text in the article; every
  <img> must point at a non-empty image file of the site and must have loaded in the browser
  (naturalWidth > 0, reported by a small script the local server injects into `?check` pages);
* every request the browser itself made to the local server (css, js, images) must have
  succeeded -- a 404 here is a broken page;
* `chromium --screenshot`: saved as docs/_build/screenshots/<page>.png (and <page>-figure.png
  around the first figure); must not be blank;
* the search page must find a word of a chapter title.

Exit status 0 when all pages pass, 1 otherwise. Without a `chromium` binary it prints a SKIP
message and exits 0 (install: `apt-get update && apt-get install -y chromium`); set
DOCS_BROWSER_REQUIRED=1 to make a missing browser an error instead.
Usage: python docs/browser_check.py [PAGE.html ...]
"""
import functools, html, html.parser, http.server, json, os, re, shutil, subprocess, sys, tempfile, threading
from pathlib import Path
from urllib.parse import urljoin, urlparse, unquote

DOCS = Path(__file__).resolve().parent
SITE = DOCS / "_build" / "html"
SHOTS = DOCS / "_build" / "screenshots"
TIMEOUT = 90  # seconds per browser launch

CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
                # the site is checked offline: any host but the local server fails at once
                # (MathJax from its CDN, for instance, simply does not load)
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--virtual-time-budget=10000"]


def find_browser():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        p = shutil.which(name)
        if p: return p


# Injected into pages requested with `?check`: after load, it records in a <meta> tag how many
# <img> there are, which did not load (naturalWidth 0), and where the first figure is (for a
# second screenshot around it).
CHECK_JS = b"""<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
                .map(function (i) { return i.getAttribute('src'); });
  var m = document.createElement('meta'); m.name = 'browser-check';
  var f = document.querySelector('article img'), r = f ? f.getBoundingClientRect() : null;
  m.content = JSON.stringify({n: imgs.length, bad: bad,
                              fig: r ? [Math.round(r.top + window.scrollY), Math.round(r.height)] : null});
  document.head.appendChild(m);
});
</script>"""


class Log(http.server.SimpleHTTPRequestHandler):
    "Serves the site and records (path, status) of every request."
    requests, lock = [], threading.Lock()

    def log_message(self, *a): pass

    def do_GET(self):
        u = urlparse(self.path)
        f = SITE / unquote(u.path).lstrip("/")
        if u.query == "check" and f.suffix == ".html" and f.is_file():
            body = f.read_bytes().replace(b"</body>", CHECK_JS + b"</body>", 1)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def send_response(self, code, message=None):
        with self.lock: self.requests.append((unquote(urlparse(self.path).path), code))
        super().send_response(code, message)


class Page(html.parser.HTMLParser):
    "Collects <img src>, whether there is an <h1>, and the article's text."
    def __init__(self):
        super().__init__()
        self.imgs, self.h1, self.text, self._in_article, self._skip = [], False, [], 0, 0
        self._in_h1, self.h1_text = False, ""


    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img" and a.get("src"): self.imgs.append(a["src"])
        if tag == "h1": self._in_h1 = not self.h1; self.h1 = True  # text of the first <h1> only
        if tag == "article": self._in_article += 1
        if tag in ("script", "style"): self._skip += 1

    def handle_endtag(self, tag):
        if tag == "article": self._in_article = max(0, self._in_article - 1)
        if tag == "h1": self._in_h1 = False
        if tag in ("script", "style"): self._skip = max(0, self._skip - 1)

    def handle_data(self, data):
        if self._in_article and not self._skip: self.text.append(data)
        if self._in_h1: self.h1_text += " " + data


def chromium(browser, args, profile):
    cmd = [browser, *CHROME_FLAGS, f"--user-data-dir={profile}", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    return r


def is_image(path: Path):
    head = path.read_bytes()[:512]
    return (head.startswith(b"\x89PNG") or head.startswith(b"\xff\xd8") or head.startswith(b"GIF8")
            or b"<svg" in head or head.startswith(b"RIFF"))


def not_blank(png: Path):
    "True if the screenshot has more than one colour (PIL comes with matplotlib)."
    try:
        from PIL import Image
    except ImportError:
        return png.stat().st_size > 5000
    with Image.open(png) as im:
        ex = im.convert("L").getextrema()
        return ex[0] != ex[1]


def default_pages():
    "index + first chapter + the chapter with most figures (or the second chapter)."
    order = []
    nbs = DOCS / "_nbs"
    if nbs.exists():  # reading order as staged by stage_nbs.py
        sys.path.insert(0, str(DOCS))
        from stage_nbs import chapter_key
        order = [p.stem + ".html" for p in sorted(nbs.glob("*.ipynb"), key=chapter_key) if p.stem != "index"]
    order = [p for p in order if (SITE / p).exists()]
    if not order: return ["index.html"]
    first = order[0]
    rest = order[1:]
    nimg = lambda p: len(re.findall(r"<img\b", (SITE / p).read_text(encoding="utf-8", errors="replace")))
    second = max(rest, key=nimg) if rest and max(map(nimg, rest)) > 0 else (rest[0] if rest else None)
    return ["index.html", first] + ([second] if second else [])


def check_page(browser, base, page, profile):
    errors = []
    url = urljoin(base, page) + "?check"
    start = len(Log.requests)
    r = chromium(browser, ["--window-size=1280,1600", "--dump-dom", url], profile)
    dom = r.stdout
    if r.returncode != 0 or not dom.strip():
        return [f"{page}: chromium --dump-dom failed (rc={r.returncode}): {r.stderr[-500:]}"], ""
    p = Page(); p.feed(dom)
    text = " ".join(" ".join(p.text).split())
    if not p.h1: errors.append(f"{page}: no <h1> in the rendered page")
    if len(text) < 40: errors.append(f"{page}: article is (nearly) empty: {text[:80]!r}")
    for src in p.imgs:
        u = urlparse(urljoin(url, src))
        if u.scheme in ("data",): continue
        if u.hostname not in ("127.0.0.1", None):
            continue  # external images (badges) are not part of the offline site
        f = SITE / unquote(u.path).lstrip("/")
        if not f.is_file() or f.stat().st_size == 0: errors.append(f"{page}: <img src={src!r}>: file missing or empty")
        elif not is_image(f): errors.append(f"{page}: <img src={src!r}>: not an image file")
    m, res = re.search(r'<meta name="browser-check" content="([^"]*)"', dom), {}
    if not m: errors.append(f"{page}: the page's load event never fired (check script did not run)")
    else:
        res = json.loads(html.unescape(m.group(1)))
        for src in res["bad"]: errors.append(f"{page}: <img src={src!r}> did not load in the browser (naturalWidth 0)")
    bad = [(path, code) for path, code in Log.requests[start:] if code >= 400 and path != "/favicon.ico"]
    for path, code in bad: errors.append(f"{page}: the browser got HTTP {code} for {path}")
    shot = SHOTS / (Path(page).stem + ".png")
    r = chromium(browser, ["--window-size=1280,1600", f"--screenshot={shot}", url], profile)
    if not shot.exists() or shot.stat().st_size == 0: errors.append(f"{page}: no screenshot ({r.stderr[-300:]})")
    elif not not_blank(shot): errors.append(f"{page}: screenshot is blank")
    if res.get("fig"):  # a second screenshot: the page down to the first figure, cropped around it
        top, h = res["fig"]
        fig = SHOTS / (Path(page).stem + "-figure.png")
        height = min(top + max(h, 300) + 200, 16000)
        chromium(browser, [f"--window-size=1280,{height}", f"--screenshot={fig}", url], profile)
        try:
            from PIL import Image
            with Image.open(fig) as im:
                im.crop((0, max(0, top - 400), 1280, min(im.height, top + max(h, 300) + 200))).save(fig)
        except ImportError: pass
    print(f"  {page}: {len(text)} chars of text, {len(p.imgs)} <img>, "
          f"{len(Log.requests) - start} requests, screenshot {shot.relative_to(DOCS.parent)}"
          + ("" if not errors else "  -- FAIL"), flush=True)
    return errors, p.h1_text


def check_search(browser, base, word, profile):
    "The search page must find the word (Sphinx's client-side search over searchindex.js)."
    r = chromium(browser, ["--dump-dom", urljoin(base, f"search.html?q={word}")], profile)
    hits = re.findall(r'<ul[^>]*class="search"[^>]*>(.*?)</ul>', r.stdout, re.S)
    n = len(re.findall(r"<li", hits[0])) if hits else 0
    print(f"  search.html?q={word}: {n} result(s)", flush=True)
    return [] if n else [f"search for {word!r} (a word of a chapter title) found nothing"]


def main(pages):
    if not (SITE / "index.html").exists():
        print(f"browser_check: {SITE}/index.html missing: run `bash docs/build.sh` first"); return 1
    browser = find_browser()
    if not browser:
        msg = "browser_check: SKIP: no chromium found (apt-get update && apt-get install -y chromium)"
        print(msg)
        return 1 if os.environ.get("DOCS_BROWSER_REQUIRED") == "1" else 0
    pages = pages or default_pages()
    SHOTS.mkdir(parents=True, exist_ok=True)
    handler = functools.partial(Log, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.timeout = 10
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/"
    print(f"browser_check: {browser} on {base} -> {', '.join(pages)}", flush=True)
    errors, search_word = [], None
    try:
        with tempfile.TemporaryDirectory(prefix="docs-chromium-") as profile:
            for page in pages:
                if not (SITE / page).exists(): errors.append(f"{page}: not in the built site"); continue
                try:
                    errs, h1 = check_page(browser, base, page, profile)
                    errors += errs
                    words = sorted(re.findall(r"[A-Za-z]{5,}", h1), key=len)
                    if page != "index.html" and words: search_word = words[-1]
                except subprocess.TimeoutExpired: errors.append(f"{page}: chromium timed out after {TIMEOUT}s")
            if search_word:
                try: errors += check_search(browser, base, search_word, profile)
                except subprocess.TimeoutExpired: errors.append(f"search: chromium timed out after {TIMEOUT}s")
    finally:
        httpd.shutdown(); httpd.server_close(); t.join(timeout=5)
    for e in errors: print("  ERROR", e)
    print("browser_check:", "FAILED" if errors else "OK", flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
