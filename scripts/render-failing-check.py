"""Renders docs/failing-check.png, the README's picture of a failing check.

Runs examples/faulty.yaml as GitHub Actions would, then draws its annotations and job summary the
way a pull request shows them: a screenshot by headless Chromium where a `chromium` binary is on
the PATH, else the page laid out by WeasyPrint and rasterized by pdfium. Needs the `markdown`
package, and `weasyprint`, `pypdfium2` and `pillow` without Chromium (none is a dependency of
onnx-parity). The tool runs with ONNX_PARITY_PYTHON (default: this Python), so the drawing tools
may live in a virtual environment of their own:

    ONNX_PARITY_PYTHON=.venv/bin/python /tmp/render/bin/python scripts/render-failing-check.py

Without Chromium the emoji that a system without an emoji font cannot draw are drawn as the
closest symbols its fonts have (❌ as a red ✗, 📍 as ▶).
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import markdown

ROOT = Path(__file__).resolve().parent.parent
STYLE = """
body { font: 14px -apple-system, 'Segoe UI', 'Noto Sans', Helvetica, Arial, sans-serif;
       color: #1f2328; margin: 24px; width: 1100px; }
h1.job { font-size: 18px; } .box { border: 1px solid #d0d7de; border-radius: 6px;
       margin-bottom: 20px; } .box > .head { background: #f6f8fa; padding: 8px 16px;
       border-bottom: 1px solid #d0d7de; font-weight: 600; }
.annotation { padding: 8px 16px; border-top: 1px solid #d0d7de; }
.annotation:first-of-type { border-top: none; }
.annotation .title { color: #d1242f; font-weight: 600; }
.annotation .where { color: #59636e; font-size: 12px; }
.annotation pre { white-space: pre-wrap; margin: 4px 0 0; font-size: 12px; }
.summary { padding: 0 16px 8px; } table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 10px; font-size: 13px; vertical-align: top; }
th { background: #f6f8fa; } td:last-child { max-width: 620px; } h2 { font-size: 20px; }
h3 { font-size: 15px; } details { display: none; }
"""


def unescape(text: str) -> str:
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":") \
        .replace("%2C", ",").replace("%25", "%")


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        summary = Path(work) / "summary.md"
        env = {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(ROOT),
               "GITHUB_STEP_SUMMARY": str(summary)}
        python = os.environ.get("ONNX_PARITY_PYTHON") or sys.executable
        run = subprocess.run(
            [python, "-m", "onnx_parity", "run", "examples/faulty.yaml"],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        annotations = []
        for line in run.stdout.splitlines():
            if not line.startswith("::error "):
                continue
            properties, message = line[len("::error "):].split("::", 1)
            fields = dict(p.split("=", 1) for p in properties.split(","))
            title = html.escape(unescape(fields["title"]))
            where = f'{html.escape(fields["file"])}#L{fields.get("line", "")}'
            annotations.append(
                f'<div class="annotation"><div class="title">{title}</div>'
                f'<div class="where">{where}</div>'
                f'<pre>{html.escape(unescape(message))}</pre></div>')
        body = markdown.markdown(summary.read_text(), extensions=["tables"])
        page = Path(work) / "page.html"
        page.write_text(
            f"<html><head><meta charset='utf-8'><style>{STYLE}</style></head><body>"
            f"<h1 class='job'>❌ parity / check (pull_request) — exit code {run.returncode}</h1>"
            f"<div class='box'><div class='head'>Annotations: {len(annotations)} errors</div>"
            f"{''.join(annotations)}</div>"
            f"<div class='box'><div class='head'>parity summary</div><div class='summary'>{body}"
            f"</div></div></body></html>")
        out = ROOT / "docs" / "failing-check.png"
        out.parent.mkdir(exist_ok=True)
        if shutil.which("chromium"):
            subprocess.run(
                ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--run-all-compositor-stages-before-draw",
                 "--virtual-time-budget=5000", f"--screenshot={out}", "--window-size=1150,1560",
                 page.as_uri()],
                check=True, capture_output=True)
        else:
            _weasyprint(page, out)
        print(f"wrote {out.relative_to(ROOT)}")


_NO_EMOJI = {"❌": '<span style="color:#d1242f">✗</span>',
             "✅": '<span style="color:#1a7f37">✓</span>',
             "💥": '<span style="color:#d1242f">✸</span>',
             "⏭️": "»", "📍": "▶", "💡": "☞", "⚠️": "⚠"}


def _weasyprint(page: Path, out: Path) -> None:
    """The page at 1150×1560 CSS pixels, drawn at twice that for a sharp picture."""
    import pypdfium2
    import weasyprint

    text = page.read_text(encoding="utf-8")
    for emoji, symbol in _NO_EMOJI.items():
        text = text.replace(emoji, symbol)
    text = text.replace("<style>", "<style>@page { size: 1150px 1560px; margin: 0 } ")
    pdf = weasyprint.HTML(string=text, base_url=str(page.parent)).write_pdf()
    first = pypdfium2.PdfDocument(pdf)[0]
    first.render(scale=2 * 72 / 96).to_pil().save(out)


if __name__ == "__main__":
    main()
