"""Render a job summary (Markdown with Mermaid charts) to a PNG in a real browser, offline.

GitHub renders `mermaid` blocks in job summaries and comments; this draws the same Markdown the
way a reviewer sees it, to look at the charts before a change ships. Nothing is downloaded: the
page loads marked and mermaid from a local npm folder and Chromium runs headless.

    npm install --prefix /tmp/mermaid mermaid@11 marked@14
    apt-get install chromium
    python scripts/render_summary.py tests/golden/summary.md docs/summary.png \
        --npm /tmp/mermaid/node_modules
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

PAGE = """<!doctype html>
<html><head><meta charset="utf-8">
<style>
  body {{ font: 14px -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
         max-width: 1012px; margin: 24px auto; }}
  table {{ border-collapse: collapse; margin: 12px 0; }}
  th, td {{ border: 1px solid #d1d9e0; padding: 6px 13px; }}
  tr:nth-child(2n) {{ background: #f6f8fa; }}
  code {{ background: #eff1f3; padding: 2px 4px; border-radius: 4px; font-size: 85%; }}
  details {{ margin: 8px 0; }}
</style>
<script src="file://{npm}/marked/marked.min.js"></script>
<script src="file://{npm}/mermaid/dist/mermaid.min.js"></script>
</head><body><div id="summary"></div>
<script>
  const source = {markdown};
  const box = document.getElementById("summary");
  box.innerHTML = marked.parse(source);
  for (const d of box.querySelectorAll("details")) d.open = true;
  for (const block of box.querySelectorAll("code.language-mermaid")) {{
    const div = document.createElement("div");
    div.className = "mermaid";
    div.textContent = block.textContent;
    block.parentElement.replaceWith(div);
  }}
  mermaid.initialize({{ startOnLoad: false, securityLevel: "strict" }});
  mermaid.run();
</script></body></html>
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("markdown", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--npm", type=Path, required=True, help="a node_modules folder")
    parser.add_argument("--height", type=int, default=4000)
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("no chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as work:
        page = Path(work) / "summary.html"
        page.write_text(PAGE.format(npm=args.npm.resolve(),
                                    markdown=json.dumps(args.markdown.read_text())))
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--allow-file-access-from-files", "--virtual-time-budget=8000",
                        f"--window-size=1060,{args.height}",
                        f"--screenshot={args.png.resolve()}", page.as_uri()],
                       check=True, capture_output=True)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
