"""Lighthouse scores of six pages, offline: `make lighthouse`, and a table in `make bench`'s report.

    python -m tests.lighthouse [SITE_DIR]     # default: site/ (built first if missing)

Lighthouse comes from npm (pinned in package.json, installed by ``npm ci``) and drives
Debian's Chromium (``CHROME_PATH``; it downloads no browser) against Python's
http.server on 127.0.0.1 serving the built site: the home page, one concept page and
one lab page, in both languages. Mobile form factor with Lighthouse's default
simulated throttling (slow 4G, 4x CPU slowdown), the setting its targets are usually
quoted for. A benchmark, not a test: it is not part of `make test`.

Each page is measured twice: from plain http.server, which sends everything
uncompressed, and from the same server gzipping HTML, CSS, JS and SVG as GitHub Pages
does, which is what a reader of the published site gets.
"""

from __future__ import annotations

import functools
import gzip
import http.server
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIGHTHOUSE = ROOT / "node_modules" / ".bin" / "lighthouse"
CHROMIUM = "/usr/bin/chromium"
FLAGS = "--headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update --disable-sync --no-first-run"
PAGES = ["", "pytorch/autograd/", "labs/autograd/", "zh/", "zh/pytorch/autograd/", "zh/labs/autograd/"]
CATEGORIES = ["performance", "accessibility", "best-practices", "seo"]
TARGET = 95


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class GzipHandler(QuietHandler):
    """Gzip text responses when the browser accepts it, as GitHub Pages does."""

    TEXT = (".html", ".css", ".js", ".svg", ".json", ".xml", ".txt")

    def send_head(self):
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            if not self.path.split("?")[0].endswith("/"):
                return super().send_head()  # its redirect to the folder
            path = path / "index.html"
        if ("gzip" not in self.headers.get("Accept-Encoding", "") or path.suffix not in self.TEXT
                or not path.is_file()):
            return super().send_head()
        body = gzip.compress(path.read_bytes(), 6)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)


def audit(url: str, out: Path) -> dict:
    """One Lighthouse run; returns its JSON report."""
    if not LIGHTHOUSE.is_file():
        raise SystemExit(f"{LIGHTHOUSE} missing: run `npm ci` (make lighthouse does)")
    cmd = [str(LIGHTHOUSE), url, "--quiet", "--output=json", f"--output-path={out}",
           f"--only-categories={','.join(CATEGORIES)}", f"--chrome-flags={FLAGS}",
           "--disable-full-page-screenshot", "--max-wait-for-load=60000"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, CHROME_PATH=CHROMIUM))
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"lighthouse {url} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(out.read_text(encoding="utf-8"))


def lost_points(report: dict) -> list[str]:
    """The audits that cost points, per category, with what Lighthouse measured."""
    lines = []
    for name in CATEGORIES:
        category = report["categories"][name]
        for ref in category["auditRefs"]:
            result = report["audits"][ref["id"]]
            if ref["weight"] and result.get("score") is not None and result["score"] < 1:
                shown = result.get("displayValue") or ""
                lines.append(f"{name}: {result['title']} ({result['score']:.2f}{', ' + shown if shown else ''})")
    return lines


def run(site: Path, handler_class=QuietHandler) -> tuple[list[tuple], dict[str, list[str]]]:
    handler = functools.partial(handler_class, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/"
    rows, lost = [], {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, page in enumerate(PAGES):
                report = audit(base + page, Path(tmp) / f"{i}.json")
                scores = [round(100 * (report["categories"][c]["score"] or 0)) for c in CATEGORIES]
                rows.append(("/" + page, *scores))
                lost["/" + page] = lost_points(report)
    finally:
        httpd.shutdown()
    return rows, lost


def markdown(site: Path) -> str:
    """The report section for `make bench`."""
    rows, notes = [], []
    try:
        for served, handler in (("gzip (as Pages)", GzipHandler), ("plain http.server", QuietHandler)):
            measured, lost = run(site, handler)
            rows += [(page, served, *scores) for page, *scores in measured]
            notes += [f"- `{page}`, {served}: " + "; ".join(items) for page, items in lost.items() if items]
    except (RuntimeError, subprocess.TimeoutExpired, SystemExit) as error:
        return f"## Lighthouse\n\nnot measured: {error}"
    head = ("page", "served", "performance", "accessibility", "best practices", "SEO")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(cell) + ("" if i < 2 or cell >= TARGET else " ⚠") for i, cell in enumerate(row))
              + " |" for row in rows]
    return "\n".join([f"## Lighthouse (mobile, simulated throttling; target ≥ {TARGET}, ⚠ below)", "",
                      *lines, "", "Audits that cost points:", "", *(notes or ["- none"])])


def main(argv: list[str]) -> int:
    site = Path(argv[1]) if len(argv) > 1 else ROOT / "site"
    if not (site / "index.html").is_file():
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT,
                       check=True, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    print(markdown(site))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
