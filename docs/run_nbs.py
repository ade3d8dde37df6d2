"""Execute the notebooks once: the notebook tests AND the outputs the docs site shows.

`make nbtest` runs this instead of `nbdev_test`. Each notebook is executed exactly as `nbdev_test`
executes it (nbdev's own `execnb.CaptureShell`, in the notebook's folder, `IN_TEST=1`, the
repository root on `sys.path`, cells carrying a flag of `tst_flags` in settings.ini -- `notest`,
`slow`, `gpu` -- or `#| eval: false` are not run, nor `nbdev_export()` cells, nor notebooks whose
front matter says `skip_exec` or that sit next to a `.notest` file), each in a process of its
own (what one leaves in memory must not add up). The first error stops that notebook and fails
the run, with nbdev's traceback; so does running past `--timeout` (a hung notebook must not hold
CI until its limit).

What nbdev_test throws away is kept: the executed notebook -- the source notebook with every
cell that ran carrying its fresh outputs (a skipped cell keeps the outputs saved in nbs/) -- is
written to the build folder (default `docs/_build/executed/`, never nbs/), with
`metadata.minivllm_executed` set. `docs/build.sh docs/_build/executed` builds the site from
these, so every page shows the results of this run and nothing is executed twice. Every PNG
matplotlib writes during the run records its smallest font size (`record_font_sizes`), for the
docs' figure-text check.

Usage (from the repository root):
  python docs/run_nbs.py [--out DIR] [--n_workers N] [--flags "gpu slow"] [NOTEBOOK ...]
With no NOTEBOOK, every notebook of nbs/ (and the files beside them, e.g. images, are copied
into DIR so the site finds them). Exit status 1 if any notebook failed.
"""
import argparse, functools, json, multiprocessing, os, shutil, signal, sys, time, traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "docs" / "_build" / "executed"
TIMINGS = "nb_timings.json"  # docs/_build/nb_timings.json: seconds per notebook, last full run


def _config():
    sys.path.insert(0, str(ROOT))
    from nbdev.config import get_config
    return get_config(path=ROOT)


class NotebookTimeout(Exception): pass


def _alarm(signum, frame): raise NotebookTimeout("the notebook ran past --timeout")


def record_font_sizes():
    """Make every PNG that matplotlib writes in this process carry its smallest font size: a text
    chunk `min_font_pt` (the smallest size, in points, of the figure's non-empty visible texts,
    tick labels included). docs/browser_check.py reads it to compute the smallest text of each
    figure as the page shows it (pt x dpi / 72 x shown width / saved width); the image itself is
    unchanged. Applies to the notebooks' inline figures and to the PNG files they save."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
        from matplotlib.text import Text
    except ImportError: return
    orig = FigureCanvasBase.print_figure
    if getattr(orig, "_min_font_pt", False): return

    def print_figure(self, filename, *args, **kwargs):
        fmt = kwargs.get("format") or (os.fspath(filename).rsplit(".", 1)[-1]
                                       if isinstance(filename, (str, os.PathLike)) else None)
        if str(fmt or "").lower() == "png" and "min_font_pt" not in (kwargs.get("metadata") or {}):
            try:
                fig = self.figure
                fig.draw_without_rendering()  # tick labels get their text at draw time
                sizes = [t.get_fontsize() for t in fig.findobj(Text)
                         if t.get_visible() and t.get_text().strip() and t.get_alpha() != 0]
                if sizes:
                    kwargs["metadata"] = {**(kwargs.get("metadata") or {}),
                                          "min_font_pt": f"{min(sizes):g}"}
            except Exception:  # never let the docs' bookkeeping break a notebook's figure
                pass
        return orig(self, filename, *args, **kwargs)

    print_figure._min_font_pt = True
    FigureCanvasBase.print_figure = print_figure


def run_one(fn, out, skip_flags, force_flags, timeout=0):
    "Execute `fn` as nbdev's test_nb does; write the executed notebook to `out`. -> (ok, secs, err)"
    from execnb.nbio import read_nb, write_nb
    from execnb.shell import CaptureShell
    from fastcore.basics import str2bool
    from fastcore.xtras import working_directory
    from nbdev.frontmatter import FrontmatterProc
    from nbdev.process import NBProcessor, nb_lang

    fn, out = Path(fn), Path(out)
    if str(ROOT) not in sys.path: sys.path.insert(0, str(ROOT))
    os.environ["IN_TEST"] = "1"
    record_font_sizes()
    flags = set(skip_flags) - set(force_flags)
    raw = read_nb(fn)            # what is written out: the notebook as it is, plus fresh outputs
    proc = NBProcessor(fn, procs=FrontmatterProc)  # what runs: directives removed, as nbdev_test
    for i, c in enumerate(proc.nb.cells): c.src_idx_ = i
    proc.process()
    fm = getattr(proc.nb, "frontmatter_", {})
    start = time.time()
    ok, err = True, ""
    if not (str2bool(fm.get("skip_exec", False)) or nb_lang(proc.nb) != "python"):
        k = CaptureShell(fn)
        if timeout: signal.signal(signal.SIGALRM, _alarm); signal.alarm(timeout)
        try:
            with working_directory(fn.parent):
                for cell in proc.nb.cells:
                    if cell.cell_type != "code" or "nbdev_export" + "(" in cell.source: continue
                    d = getattr(cell, "directives_", {}) or {}
                    if d.get("eval:", [""])[0].lower() == "false" or flags & d.keys(): continue
                    k._cell_idx = cell.idx_ + 1
                    outs = k.run(cell.source)
                    raw.cells[cell.src_idx_]["outputs"] = outs or []
                    if k.exc:  # the first error stops the notebook, as in nbdev_test
                        ok, err = False, k.prettytb(fname=fn)
                        break
        except Exception:
            ok, err = False, traceback.format_exc()
        finally:
            if timeout: signal.alarm(0)
    raw.metadata["minivllm_executed"] = {"ok": ok, "notebook": str(fn)}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_nb(raw, out)
    return ok, time.time() - start, err


def _reap(name):
    "Stop processes a notebook started and left running (e.g. an engine process after a failure)."
    import multiprocessing
    kids = multiprocessing.active_children()
    for p in kids: p.terminate()
    for p in kids:
        p.join(5)
        if p.is_alive(): p.kill(); p.join(5)
    if kids: print(f"  {name}: stopped {len(kids)} process(es) it left running", flush=True)


def _worker(item, skip_flags, force_flags, nb_timeout=0, do_print=True):
    fn, out = item
    if do_print: print(f"Starting {fn.name}", flush=True)
    try: ok, secs, err = run_one(fn, out, skip_flags, force_flags, nb_timeout)
    except BaseException: ok, secs, err = False, 0.0, traceback.format_exc()
    _reap(fn.name)
    if err: sys.stderr.write(err + "\n"); sys.stderr.flush()
    if do_print: print(f"- {'Completed' if ok else 'FAILED'} {fn.name} in {secs:.0f}s", flush=True)
    return ok, secs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="*", help="notebooks to run (default: every one of nbs/)")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="folder for the executed notebooks")
    ap.add_argument("--n_workers", type=int, default=2)
    ap.add_argument("--flags", default="", help="flags of tst_flags to run anyway, e.g. 'gpu'")
    ap.add_argument("--timeout", type=int, default=1200,
                    help="seconds one notebook may run before it fails (0: no limit)")
    a = ap.parse_args(argv)
    cfg = _config()
    nbs = Path(cfg.nbs_path)
    out = Path(a.out).resolve()
    if out == nbs.resolve() or out in nbs.resolve().parents or out == ROOT:
        ap.error(f"--out {out}: the executed notebooks go to a build folder, not over the sources")
    skip_flags, force_flags = cfg.tst_flags.split(), a.flags.split()
    if a.notebooks: files = [Path(f).resolve() for f in a.notebooks]
    else:
        files = sorted(p for p in nbs.glob("*.ipynb") if not p.name.startswith(("_", ".")))
        if out.exists(): shutil.rmtree(out)  # a full run: nothing stale may survive
        out.mkdir(parents=True)
        for f in nbs.rglob("*"):  # files beside the notebooks (figures linked from Markdown)
            rel = f.relative_to(nbs)
            if f.is_file() and f.suffix != ".ipynb" and not any(
                    p.startswith((".", "_")) for p in rel.parts):
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, out / rel)
    files = [f for f in files if not (f.parent / ".notest").exists()]
    if not files: print("run_nbs: no notebooks"); return 1
    # longest first (timings of the last full run), so two workers finish together
    last = DEFAULT_OUT.parent / TIMINGS
    old = json.loads(last.read_text()) if last.exists() else {}
    files.sort(key=lambda f: -old.get(f.name, 0))
    items = [(f, out / f.name) for f in files]
    # Triton decides at its first import whether its kernels are interpreted: on a machine without
    # CUDA every notebook's process starts interpreting, as each chapter that defines kernels asks.
    import torch
    if not torch.cuda.is_available(): os.environ.setdefault("TRITON_INTERPRET", "1")
    start = time.time()
    run = functools.partial(_worker, skip_flags=skip_flags, force_flags=force_flags,
                            nb_timeout=a.timeout)
    if len(items) == 1: res = [run(items[0])]
    else:   # a fresh process per notebook: what one leaves in memory (models, compiled code, the
            # allocator's arenas) must not add up over the notebooks a worker runs (an OOM kill)
        with ProcessPoolExecutor(a.n_workers, mp_context=multiprocessing.get_context("spawn"),
                                 max_tasks_per_child=1) as pool:
            res = list(pool.map(run, items))
    times = {f.name: t for f, (ok, t) in zip(files, res)}
    if not a.notebooks:
        last.parent.mkdir(parents=True, exist_ok=True)
        last.write_text(json.dumps(times, indent=1))
    for name, t in sorted(times.items(), key=lambda o: -o[1]): print(f"{name}: {int(t)} secs")
    failed = [f.name for f, (ok, _) in zip(files, res) if not ok]
    print(f"run_nbs: {len(files) - len(failed)} passed, {len(failed)} failed "
          f"in {time.time() - start:.0f}s; executed notebooks in {out}", flush=True)
    if failed:
        sys.stderr.write("\nNotebook tests failed on:\n\t" + "\n\t".join(failed) + "\n")
        return 1
    return 0


if __name__ == "__main__":
    # the workers must find `_worker` in a real module: executing a notebook replaces the
    # worker's `__main__` (IPython's user namespace), so `__main__._worker` would not unpickle
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import run_nbs
    sys.exit(run_nbs.main())
