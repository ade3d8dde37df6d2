"""The book's reading path, in one place: the core chapters in the order a newcomer reads them,
and where each optional chapter (a detour) hangs off that path.

Read by docs/stage_nbs.py (the path strip on core pages, the detour box on the others, the path on
the home page), docs/conf.py (each page's "previous" and "next" links) and docs/site_check.py
(every chapter ends with a `## Recap` whose `**Next:**` link is the one named here). A new chapter
needs no entry: its number puts it in a detour group (DETOURS).
"""
import re

# the core path: a lesson with pictures from the request's ledger to what vLLM adds on top
CORE = ["00", "01", "02", "03", "04", "30", "21", "22", "33"]
# optional chapters, by number: (first, last) -> the core chapter after which they read best
DETOURS = [((5, 9), "04"), ((10, 19), "21"), ((20, 29), "22"), ((31, 39), "30")]
REFERENCE = (90, 99)   # the Sources and API pages come after the path


def number(stem: str) -> str | None:
    "The chapter number of a page (`04_scheduler` -> '04'), None for the home page."
    m = re.match(r"(\d+)_", stem)
    return m.group(1) if m else None


def role(stem: str) -> str:
    "'home', 'core', 'detour' or 'reference'."
    n = number(stem)
    if n is None: return "home"
    if n in CORE: return "core"
    return "reference" if REFERENCE[0] <= int(n) <= REFERENCE[1] else "detour"


def anchor(stem: str) -> str | None:
    "The core chapter number a detour hangs off (None for other pages)."
    if role(stem) != "detour": return None
    n = int(number(stem))
    return next((a for (lo, hi), a in DETOURS if lo <= n <= hi), CORE[-1])


class Path:
    "The path over the pages that exist (`stems`: every page's file stem, the home page `index`)."
    def __init__(self, stems):
        self.stems = sorted(stems, key=lambda s: (number(s) is not None, int(number(s) or 0)))
        by_num = {number(s): s for s in self.stems if number(s)}
        self.core = [by_num[n] for n in CORE if n in by_num]
        self.reference = [s for s in self.stems if role(s) == "reference"]
        self.by_num = by_num

    def detours(self, core_stem: str) -> list[str]:
        "The detours of a core chapter, in number order."
        return [s for s in self.stems if anchor(s) == number(core_stem)]

    def next(self, stem: str) -> str | None:
        "The page a reader goes to after `stem` on the path (a detour leads back to it)."
        r = role(stem)
        if r == "home": return self.core[0] if self.core else None
        if r == "core":
            i = self.core.index(stem)
            return self.core[i + 1] if i + 1 < len(self.core) else (self.reference or [None])[0]
        if r == "reference":
            i = self.reference.index(stem)
            return self.reference[i + 1] if i + 1 < len(self.reference) else None
        group = self.detours(self.by_num[anchor(stem)])
        i = group.index(stem)
        return group[i + 1] if i + 1 < len(group) else self.next(self.by_num[anchor(stem)])

    def prev(self, stem: str) -> str | None:
        "The page before `stem`: the previous core chapter, or the previous detour / its anchor."
        r = role(stem)
        if r == "home": return None
        if r == "core":
            i = self.core.index(stem)
            return self.core[i - 1] if i else "index"
        if r == "reference":
            i = self.reference.index(stem)
            return self.reference[i - 1] if i else (self.core or ["index"])[-1]
        group = self.detours(self.by_num[anchor(stem)])
        i = group.index(stem)
        return group[i - 1] if i else self.by_num[anchor(stem)]
