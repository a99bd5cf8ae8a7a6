"""Every relative link in the README and in docs/ points at a file that exists, and a link's #anchor at a heading
of that file (GitHub's heading anchors). Reads text only: fast."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose(path: Path) -> list[str]:
    """The file's lines outside fenced code blocks."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def _slug(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    bad = []
    for line in _prose(path):
        line = re.sub(r"`[^`]*`", "", line)  # a link inside a code span is text
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = path if not file_part else (path.parent / file_part).resolve()
            if not dest.exists():
                bad.append(f"{path.relative_to(root)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{path.relative_to(root)}: {target} (no such heading)")
    return bad


def test_every_relative_link_resolves() -> None:
    files = _markdown_files()
    assert len(files) > 1
    bad = [b for f in files for b in broken_links(f)]
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_the_checker_sees_a_broken_link(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Some heading (with `code`, 2026)\n", encoding="utf-8")
    doc.write_text(
        "[ok](b.md) [ok](b.md#some-heading-with-code-2026) [gone](c.md) [no heading](b.md#other)\n"
        "```\n[in a fence](d.md)\n```\n[web](https://example.com) [self](#nothing)\n",
        encoding="utf-8",
    )
    bad = broken_links(doc, root=tmp_path)
    assert bad == [
        "a.md: c.md (no such file)",
        "a.md: b.md#other (no such heading)",
        "a.md: #nothing (no such heading)",
    ]
