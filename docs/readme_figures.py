"""The README's figures: the image outputs of nbs/index.ipynb (PNG, SVG), as files README.md can link.

README.md is nbs/index.ipynb converted to Markdown (`make readme`: `jupyter nbconvert --to markdown
--stdout`). nbconvert writes an image output as a link, `![png](index_files/NAME.png)` (or
`![svg](...NAME.svg)`), and with `--stdout` writes no file; NAME is the output's `filename` metadata
(the index's figures are displayed by `minivllm.viz.engine_map.show_png(fig, NAME)` or
`show_svg(fig, NAME)`, so the names are stable). This script
writes each such output to `index_files/NAME` beside README.md, so GitHub and any Markdown viewer
show the same figures as the site and JupyterLab. `tests/test_site.py` checks that every image
README.md links exists and equals the index's saved output.

Usage: python docs/readme_figures.py   (after saving nbs/index.ipynb with its outputs)
"""
import base64, json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "nbs" / "index.ipynb"
README = ROOT / "README.md"
FOLDER = "index_files"


def index_figures(index: Path = INDEX) -> dict[str, bytes]:
    "{NAME: bytes} of the index's image outputs that carry a `filename` (as nbconvert names them)."
    out = {}
    for cell in json.loads(index.read_text())["cells"]:
        for o in cell.get("outputs", []):
            name, data = (o.get("metadata") or {}).get("filename"), o.get("data", {})
            if not name: continue
            if "image/svg+xml" in data:     # nbconvert's Markdown prefers SVG to PNG
                svg = "".join(data["image/svg+xml"])
                out[f"{FOLDER}/{Path(name).stem}.svg"] = svg.encode()
            elif "image/png" in data:
                out[f"{FOLDER}/{Path(name).stem}.png"] = base64.b64decode(data["image/png"])
    return out


def readme_images(readme: Path = README) -> list[str]:
    "The local image paths README.md links (Markdown `![alt](path)` and HTML `<img src=...>`)."
    text = readme.read_text()
    paths = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text) + re.findall(r'<img [^>]*src="([^"]+)"', text)
    return [p for p in paths if not re.match(r"[a-z]+:", p)]


def main() -> int:
    figures = index_figures()
    for rel, data in figures.items():
        (ROOT / rel).parent.mkdir(exist_ok=True)
        (ROOT / rel).write_bytes(data)
        print(f"readme_figures: wrote {rel} ({len(data) // 1024} KiB)")
    stale = [p for p in (ROOT / FOLDER).glob("*") if f"{FOLDER}/{p.name}" not in figures]
    for p in stale:
        p.unlink()
        print(f"readme_figures: removed {FOLDER}/{p.name} (no longer an output of the index)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
