"""The HTML report in a real browser: Debian's headless Chromium loads it and takes a screenshot.

    python benchmarks/report_in_browser.py RUN_DIR [--out DIR]    (or: make browser-check)

Checks, each a line in the output and a nonzero exit when it fails:
- the page refers to nothing outside itself (no http(s)://, protocol-relative or file URL in a
  src, href or CSS url(); in-page anchors and data URIs only), so it opens from a ticket;
- Chromium parses it: the DOM it dumps has the report's headings and images;
- every image decodes in the browser: the same data URIs in a probe page whose script counts
  the images with a natural width once loaded (the report itself carries no script);
- the screenshot is written and is not blank (its pixels are not all one colour).
Exit 0 when all pass, 1 when one fails, 2 when Chromium is not installed or the run is bad.
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
EXTERNAL = re.compile(
    r"""(?:src|href)\s*=\s*["']?\s*(?:https?:|//|file:|ftp:)|url\(\s*["']?\s*(?:https?:|//|file:)""",
    re.I,
)
DATA_PNG = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, the decompressed scanlines) of a PNG, or ValueError."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, size = 8, b"", (0, 0)
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    if not size[0] or not size[1]:
        raise ValueError("no image size")
    return size[0], size[1], zlib.decompress(idat)


def run_chromium(binary: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, *args], capture_output=True, text=True, timeout=timeout
    )


def check(html_file: Path, out: Path, binary: str) -> list[tuple[bool, str]]:
    text = html_file.read_text()
    results: list[tuple[bool, str]] = []
    external = EXTERNAL.findall(text)
    results.append((not external, f"no external reference ({len(external)} found)"))
    images = DATA_PNG.findall(text)
    headings = len(re.findall(r"<h[1-6][ >]", text))
    dom = run_chromium(binary, "--dump-dom", html_file.as_uri()).stdout
    parsed = len(re.findall(r"<h[1-6][ >]", dom)) == headings and dom.count("<img ") == len(images)
    results.append((parsed, f"Chromium parsed it: {headings} headings, {len(images)} images"))
    probe = out / "probe.html"
    probe.write_text(
        "<!DOCTYPE html><html><body>"
        + "".join(f'<img src="data:image/png;base64,{b}">' for b in images)
        + "<script>window.onload=()=>{const ok=[...document.images].filter("
        "i=>i.complete&&i.naturalWidth>0).length;document.body.setAttribute('data-decoded',ok)}"
        "</script></body></html>"
    )
    probed = run_chromium(binary, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    found = re.search(r'data-decoded="(\d+)"', probed.stdout)
    decoded = int(found.group(1)) if found else -1
    results.append(
        (decoded == len(images) and decoded > 0, f"images decoded: {decoded} of {len(images)}")
    )
    shot = out / "screenshot.png"
    run_chromium(binary, f"--screenshot={shot}", "--window-size=1280,4000", html_file.as_uri())
    try:
        width, height, pixels = png_pixels(shot.read_bytes())
        blank = len(set(pixels[1 : 1 + width * 4 * 50])) <= 2  # the top rows: text on white
        results.append((not blank, f"screenshot {shot} ({width}x{height}), not blank"))
    except (OSError, ValueError, zlib.error) as exc:
        results.append((False, f"screenshot {shot}: {exc}"))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="run or suite directory")
    parser.add_argument("--out", type=Path, help="where the report, probe and screenshot go")
    args = parser.parse_args(argv)
    binary = chromium()
    if binary is None:
        print("report_in_browser: chromium is not installed (apt-get install chromium)")
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="commbench-browser-"))
    out.mkdir(parents=True, exist_ok=True)
    html_file = out / "report.html"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "report",
            str(args.run),
            "-f",
            "html",
            "-o",
            str(html_file),
        ],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        print(f"report_in_browser: commbench report failed: {made.stderr.strip()}")
        return 2
    results = check(html_file, out, binary)
    for ok, line in results:
        print(f"{'ok  ' if ok else 'FAIL'} {line}")
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
