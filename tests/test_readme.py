"""The README stays a short front door: its length, its links and pictures, and its Python examples."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").rglob("*.md"))
MAX_LINES = 300
#: Seconds one README example may take (they train tiny models: a few seconds on an idle core).
EXAMPLE_TIMEOUT_S = 240
MAX_PICTURE_BYTES = 150 * 1024
#: The README's sections, in the order a newcomer needs them.
SECTIONS = ("Five-minute tour", "The pipeline", "The library in two examples", "Bring your own CSV", "Commands",
            "Development")

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
MD_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HTML_LINK = re.compile(r"""(?:src|href)=["']([^"']+)["']""")


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code (links in code are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def links(path: Path) -> list[str]:
    text = prose(path.read_text(encoding="utf-8"))
    return MD_LINK.findall(text) + HTML_LINK.findall(text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: link text only, lower case, punctuation but ``-`` and ``_`` dropped,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown file's headings (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def python_blocks() -> list[tuple[int, str]]:
    """(line number, code) of every ```python block of the README."""
    text = README.read_text(encoding="utf-8")
    return [(text[:m.start()].count("\n") + 1, m.group(2)) for m in FENCE.finditer(text) if m.group(1) == "python"]


def test_readme_is_at_most_300_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines; move detail to docs/ (at most {MAX_LINES})"


def test_readme_sections_come_in_the_newcomers_order():
    headings = re.findall(r"^## (.+)$", FENCE.sub("", README.read_text(encoding="utf-8")), re.M)
    assert [h for h in headings if h in SECTIONS] == list(SECTIONS), headings


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path):
    broken = []
    for target in links(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no file {dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{path.relative_to(REPO)}: broken links: {broken}"


def test_readme_links_into_docs_and_shows_small_pictures():
    targets = links(README)
    assert any(t.startswith("docs/results.md") for t in targets)
    pictures = [t for t in targets if t.endswith(".png")]
    assert {Path(t).name for t in pictures} >= {"trajectories.png", "discover_cdf.png"}, pictures
    for target in pictures:
        data = (REPO / target).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n"), f"{target} is not a PNG"
        assert len(data) <= MAX_PICTURE_BYTES, f"{target} has {len(data)} bytes (at most {MAX_PICTURE_BYTES})"


def test_readme_has_python_examples():
    assert len(python_blocks()) >= 2


@pytest.mark.parametrize("line, code", python_blocks(), ids=[f"line{n}" for n, _ in python_blocks()])
def test_readme_python_example_runs(line, code, tmp_path):
    """Each block runs on its own (a reader copies one at a time), in an empty folder, on one thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=EXAMPLE_TIMEOUT_S)
    assert done.returncode == 0, f"README.md block at line {line} failed:\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"README.md block at line {line} printed nothing"
