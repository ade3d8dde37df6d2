"""The docs pipeline (docs/): its pieces on small inputs, and the built site when there is one.

The pieces run in a second: the multi-line chapter summary, the folding of imports-only exported
cells, one API entry per `@patch` method, the module source index, the PNG reader of the figure
checks. `test_built_site` runs docs/site_check.py over docs/_build/html when `bash docs/build.sh`
(or `make docs`) has built it, and skips otherwise; `make docs-check` runs the same checks and the
browser's.
"""
import importlib, struct, sys, zlib
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
sys.path.insert(0, str(DOCS))


def _mod(name):
    return importlib.import_module(name)


def test_summary_spans_lines_and_the_rest_of_the_title_cell_stays():
    st = _mod("stage_nbs")
    nb = {"cells": [{"cell_type": "code", "source": "#| default_exp x"},
                    {"cell_type": "markdown", "source": "# The title\n> One summary that runs\n"
                     "> onto a second line,\nand a lazy third.\n\nA paragraph after it."}]}
    title, summary, rest = st.title_cell(nb)
    assert title == "The title"
    assert summary == "One summary that runs onto a second line, and a lazy third."
    assert rest == "A paragraph after it."


def test_parts_and_numbers_come_from_the_file_name():
    st = _mod("stage_nbs")
    assert st.chapter_number("04_scheduler") == "04" and st.chapter_number("index") is None
    assert st.part_of("04_scheduler") == "The scheduler"
    assert st.part_of("12_paged_attention") == "The worker and the model"
    assert st.part_of("23_llm") == "The engine and serving"
    assert st.part_of("31_scheduling_lessons") == "Lessons"
    assert st.part_of("99_api") == st.part_of("98_sources") == "Sources and API"
    assert st.numbered("04_scheduler", "The scheduler") == "04 · The scheduler"
    assert st.plain("The `minivllm` command") == "The minivllm command"


def test_exported_definitions_are_read_from_the_notebook():
    st = _mod("stage_nbs")
    nb = {"cells": [{"cell_type": "code", "source": "#| export\nimport os\n@patch\ndef f(self: A): pass\n"
                     "class B: pass\nasync def g(): pass"},
                    {"cell_type": "code", "source": "def not_exported(): pass"}]}
    assert st.exported_defs(nb) == ["def f", "class B", "async def g"]


def test_imports_only_cells_fold_and_definitions_do_not():
    nbproc = _mod("nbproc")
    assert nbproc.is_plumbing("from __future__ import annotations\nimport os\n"
                              "try:\n    import triton\nexcept ImportError:\n    triton = None\n")
    assert nbproc.is_plumbing("import os\nif True:\n    import sys\n__all__ = ['x']")
    assert not nbproc.is_plumbing("import os\nX = 1")
    assert not nbproc.is_plumbing("def f(): pass")


def test_one_show_doc_per_patched_method():
    "nbdev's add_show_docs added a second entry for a @patch method that had its own show_doc."
    from execnb.nbio import dict2nb
    nbproc = _mod("nbproc")
    nb = dict2nb({"cells": [
        {"cell_type": "code", "source": "#| export\nclass S:\n    pass", "metadata": {}, "outputs": []},
        {"cell_type": "code", "source": "#| export\n@patch\ndef step(self: S): pass\n"
                                        "def helper(): pass\ndef helper2(): pass", "metadata": {},
         "outputs": []},
        {"cell_type": "code", "source": "show_doc(S.step)", "metadata": {}, "outputs": []}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    from nbdev.process import NBProcessor
    NBProcessor(nb=nb, procs=[nbproc.docs_add_show_docs]).process()
    docs = [c.source for c in nb.cells if c.source.startswith("show_doc")]
    assert docs == ["show_doc(S)", "show_doc(helper)", "show_doc(helper2)", "show_doc(S.step)"]


def test_source_index_finds_definitions(tmp_path):
    sp = _mod("source_pages")
    pkg = tmp_path / "pkg" / "core"
    pkg.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("from .core import *")
    (pkg / "__init__.py").write_text("")  # empty: no page
    (tmp_path / "pkg" / "_modidx.py").write_text("d = {}")
    (pkg / "sched.py").write_text("# %% ../nbs/04_scheduler.ipynb 3\nclass Scheduler:\n"
                                  "    def schedule(self): pass\n\n@patch\ndef extra(self: Scheduler): pass\n")
    idx = sp.SourceIndex(tmp_path, "pkg")
    assert idx.mods == {"pkg/__init__.py": "pkg", "pkg/core/sched.py": "pkg.core.sched"}
    assert idx.href("Scheduler.schedule", "pkg/core/sched.py") == "source/pkg.core.sched.html#L-3"
    assert idx.href("Scheduler.extra") == "source/pkg.core.sched.html#L-5"
    assert idx.href("nowhere") is None
    assert idx.chapters("pkg/core/sched.py") == ["04_scheduler"]


def _png(color_type, dpi=None):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, color_type, 0, 0, 0))
    if dpi: out += chunk(b"pHYs", struct.pack(">IIB", round(dpi / 0.0254), round(dpi / 0.0254), 1))
    out += chunk(b"tEXt", b"min_font_pt\x009.5")
    return out + chunk(b"IEND", b"")


def test_png_checks(tmp_path):
    sc = _mod("site_check")
    info = sc.png_info(_png(6, 100))
    assert (info["color"], info["dpi"], sc.min_font_pt(info)) == ("RGBA", 100.0, 9.5)
    for name, data, kinds in [("ok.png", _png(2, 150), []), ("low.png", _png(2, 80), ["figure-dpi"]),
                              ("pal.png", _png(3, 100), ["figure-png"]),
                              ("nodpi.png", _png(6), ["figure-dpi"])]:
        (tmp_path / name).write_bytes(data)
        assert [k for k, _ in sc.image_problems(tmp_path / name)] == kinds, name


def test_built_site():
    sc = _mod("site_check")
    if not (sc.SITE / "index.html").exists() or not sc.MANIFEST.exists():
        pytest.skip("no built site (bash docs/build.sh)")
    probs = sc.check_site()
    failing = [p for p in probs if sc.failing(p[1])]
    assert not failing, "\n".join(f"{p} [{k}]: {m}" for p, k, m in failing[:40])


def test_figures_record_their_smallest_font(tmp_path):
    "docs/run_nbs.py makes matplotlib's PNGs carry `min_font_pt`, which the figure check reads."
    import io
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    _mod("run_nbs").record_font_sizes()
    sc = _mod("site_check")
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.tick_params(labelsize=6.5)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    info = sc.png_info(buf.getvalue())
    assert info["dpi"] == 120 and sc.min_font_pt(info) == 6.5
    path = tmp_path / "f.png"
    fig, ax = plt.subplots()
    ax.set_title("t", fontsize=11)
    ax.tick_params(labelsize=12)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    assert sc.min_font_pt(sc.png_info(path.read_bytes())) == 11


def test_module_pages_by_default_exp_name(tmp_path):
    sp = _mod("source_pages")
    (tmp_path / "pkg" / "core").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("X = 1")
    (tmp_path / "pkg" / "core" / "sched.py").write_text("Y = 2")
    idx = sp.SourceIndex(tmp_path, "pkg")
    assert idx.module_page("core.sched") == ("pkg/core/sched.py", "source/pkg.core.sched.html")
    assert idx.module_page("__init__") == ("pkg/__init__.py", "source/pkg.html")
    assert idx.module_page("missing") is None


def test_type_checking_imports_are_found():
    nbproc = _mod("nbproc")
    src = ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
           "if TYPE_CHECKING: from pkg.llm import LLM\nif typing.TYPE_CHECKING:\n    import a.b as c\n")
    assert nbproc._type_checking_imports(src) == "from pkg.llm import LLM\nimport a.b as c"
    assert nbproc._type_checking_imports("import os") == ""


def test_a_method_patched_again_links_to_each_chapters_definition(tmp_path):
    sp = _mod("source_pages")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "batch.py").write_text(
        "# %% ../nbs/10_input_batch.ipynb 1\nclass InputBatch:\n    def add_request(self): pass\n")
    (tmp_path / "pkg" / "sampler.py").write_text(
        "# %% ../nbs/11_sampler.ipynb 1\n\n@patch\ndef add_request(self: InputBatch): pass\n")
    idx = sp.SourceIndex(tmp_path, "pkg")
    nm = "InputBatch.add_request"
    assert idx.href(nm, "pkg/sampler.py", chapter="10_input_batch") == "source/pkg.batch.html#L-3"
    assert idx.href(nm, "pkg/batch.py", chapter="11_sampler") == "source/pkg.sampler.html#L-3"
    assert idx.href(nm, "pkg/batch.py") == "source/pkg.batch.html#L-3"
    assert idx.href(nm) is None  # two modules define it, no chapter to choose by


def test_readme_images_are_the_index_figures():
    "Every image README.md links exists beside it and is the index's saved output (readme_figures)."
    rf = _mod("readme_figures")
    figures = rf.index_figures()
    assert figures, "the index shows its figures with show_png / show_svg(fig, NAME)"
    linked = rf.readme_images()
    assert sorted(linked) == sorted(figures), "run `make readme` (README.md from nbs/index.ipynb)"
    for rel in linked:
        path = rf.ROOT / rel
        assert path.is_file() and path.read_bytes() == figures[rel], \
            f"{rel} is not the index's output: run `python docs/readme_figures.py`"
        if path.suffix == ".png":
            info = _mod("site_check").png_info(path.read_bytes())
            assert info["color"] in ("RGB", "RGBA") and info["dpi"] >= 100
        assert path.stat().st_size < 200_000, f"{rel}: keep the README's figures small"


def test_readme_image_links_are_found(tmp_path):
    rf = _mod("readme_figures")
    md = tmp_path / "README.md"
    md.write_text("![png](index_files/a.png)\ntext ![x](https://e.org/b.png) <img src=\"c/d.png\">\n")
    assert rf.readme_images(md) == ["index_files/a.png", "c/d.png"]


def test_an_enum_entry_lists_its_members():
    "show_doc gives an Enum `EnumMeta.__call__`'s `(*args, **kwds)`; the entry shows its members."
    st = _mod("stage_nbs")
    from nbdev.showdoc import show_doc
    from minivllm.request import RequestStatus
    md = st.enum_members(show_doc(RequestStatus)._repr_markdown_(), "RequestStatus")
    assert "kwds" not in md and "class RequestStatus(IntEnum):" in md
    assert f"    WAITING = {RequestStatus.WAITING.value}" in md
    assert st.enum_members("[source](https://x/blob/main/minivllm/request.py#L1)\n```python\n"
                           "def Request(a):\n```", "Request").endswith("def Request(a):\n```")


def test_reading_path_is_the_one_the_index_states():
    "The index's prose names the core path docs/reading_path.py defines, in the same order."
    import json, re
    rp = _mod("reading_path")
    index = json.loads((DOCS.parent / "nbs" / "index.ipynb").read_text())
    text = "".join("".join(c["source"]) for c in index["cells"] if c["cell_type"] == "markdown")
    stated = re.search(r"(\d\d(?: → \d\d)+)", text).group(1).split(" → ")
    assert stated == rp.CORE


def test_reading_path_next_and_previous():
    rp = _mod("reading_path")
    stems = ["index", "00_a", "01_b", "02_c", "03_d", "04_e", "05_f", "06_g", "10_h", "11_i",
             "20_j", "21_k", "22_l", "23_m", "30_n", "31_o", "33_p", "98_q", "99_r"]
    path = rp.Path(stems)
    chain, stem = [], "index"
    while stem: chain.append(stem); stem = path.next(stem)
    assert chain == ["index", "00_a", "01_b", "02_c", "03_d", "04_e", "30_n", "21_k", "22_l",
                     "33_p", "98_q", "99_r"]
    assert [path.next(s) for s in ("05_f", "06_g", "10_h", "11_i", "20_j", "23_m", "31_o")] == \
        ["06_g", "30_n", "11_i", "22_l", "23_m", "33_p", "21_k"]
    assert [path.prev(s) for s in ("00_a", "30_n", "05_f", "06_g", "98_q")] == \
        ["index", "04_e", "04_e", "05_f", "33_p"]
    assert rp.role("05_f") == "detour" and rp.anchor("12_x") == "21"


def test_show_doc_of_shown_code_becomes_an_anchor():
    "A show_doc entry of a name the page defines in code is an anchor on that code, not a stub."
    st = _mod("stage_nbs")
    code = {"cell_type": "code", "source": "#| export\nclass S:\n    def go(self): pass",
            "metadata": {"tags": ["minivllm-export"]}, "outputs": []}
    md = "---\n\n### S.go\n\n```python\ndef go(self)\n```\n"
    doc = {"cell_type": "code", "source": "show_doc(S.go)", "metadata": {},
           "outputs": [{"output_type": "display_data", "data": {"text/markdown": md}}]}
    other = {"cell_type": "code", "source": "show_doc(T)", "metadata": {},
             "outputs": [{"output_type": "display_data", "data": {"text/markdown": "### T\n"}}]}
    nb = {"cells": [code, doc, other]}
    api = st.convert(nb, "04_x", set())
    sources = [c["source"] for c in nb["cells"]]
    assert api == {"s.go": "api-s.go", "t": "api-t"}
    assert "(api-s.go)=\n" in sources and not any("### S.go" in s for s in sources)
    assert any(s.startswith("(api-t)=\n### T") for s in sources)       # T's code is not here
    assert st.defined_names("@patch\ndef f(self: A | B): pass") == {"A.f", "B.f"}
