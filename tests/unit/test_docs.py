"""The documentation holds together: every relative link and ``#anchor`` in the Markdown files
resolves, every field of ``Settings`` is documented in docs/settings.md with its environment
variable and default, and the README stays the short front page that ``.ci/run`` relies on.

Offline and fast: the files are read from the checkout. Anchors follow GitHub's rules for
headings (ATX ``#`` headings outside code blocks; lower-cased, punctuation other than ``-`` and
``_`` dropped, each space a ``-``, a repeated slug suffixed ``-1``, ``-2``, …) plus explicit
``<a name=…>`` / ``id=…`` anchors. Each test collects every problem before it fails, so one run
lists all of them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

from pydantic import AliasChoices

from streamworker.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_DOC = ROOT / "docs" / "settings.md"

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
INLINE_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
HTML_TARGET = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"([^\"]*)\"", re.IGNORECASE)
HTML_ANCHOR = re.compile(r"<[a-z]+\b[^>]*?\b(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def doc_files() -> list[Path]:
    """The Markdown files whose links must resolve."""
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md"]
    files += sorted((ROOT / "examples").glob("**/README.md"))
    files += sorted((ROOT / "tests").glob("**/README.md"))
    files += sorted((ROOT / "docs").glob("**/*.md"))
    return [f for f in files if f.is_file()]


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
        elif fence is not None and match and match.group(1)[0] == fence[0]:
            if len(match.group(1)) >= len(fence) and not line.strip()[len(match.group(1)) :]:
                fence = None
        elif fence is None:
            yield number, line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before de-duplication)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags add no text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a link may name in ``path``: its headings' slugs and explicit anchors."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
        heading = ATX_HEADING.match(line)
        if not heading:
            continue
        slug = github_slug(heading.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def link_targets(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, target) of every link and image in ``path`` outside code."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        # Code spans are text, not links; keep their content so that [`x`](y) still matches.
        line = CODE_SPAN.sub(lambda m: m.group(2).replace("[", "(").replace("]", ")"), line)
        for pattern in (INLINE_LINK, REFERENCE_DEFINITION, HTML_TARGET):
            for target in pattern.findall(line):
                yield number, target


def shown(path: Path) -> str:
    """``path`` relative to the checkout when it is inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_link(source: Path, target: str) -> str | None:
    """Why ``target`` (as written in ``source``) does not resolve, or None when it does."""
    if not target or SCHEME.match(target) or target.startswith("//"):
        return None  # empty (nothing to check) or another site: not checked offline
    path_part, _, fragment = target.partition("#")
    resolved = (source.parent / unquote(path_part)).resolve() if path_part else source
    if not resolved.exists():
        return "no such file"
    if not fragment:
        return None
    if resolved.is_dir():
        resolved = resolved / "README.md"  # GitHub shows a folder's README under its listing
    if resolved.suffix != ".md" or not resolved.is_file():
        return f"an anchor into {shown(resolved)}, which has no headings"
    if unquote(fragment).lower() not in anchors(resolved):
        return f"no heading with the anchor #{fragment} in {shown(resolved)}"
    return None


def test_github_slug_follows_githubs_rules_for_punctuation_and_spaces() -> None:
    assert github_slug("Several processes per machine (`--processes N`)") == (
        "several-processes-per-machine---processes-n"
    )
    assert github_slug("Redis 7.0 core commands") == "redis-70-core-commands"
    assert github_slug('What "at-least-once" means here') == "what-at-least-once-means-here"
    assert github_slug("`claim_idle_ms` (handler option, default 60 000)") == (
        "claim_idle_ms-handler-option-default-60-000"
    )
    assert github_slug("See [the engine](engine.md)") == "see-the-engine"


def test_repeated_headings_get_numbered_anchors(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text("# Notes\n\n## Notes\n\n```\n# Notes\n```\n\n## Notes\n", encoding="utf-8")
    assert anchors(doc) == {"notes", "notes-1", "notes-2"}


def test_a_broken_file_or_anchor_is_reported_and_a_good_one_is_not(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n", encoding="utf-8")
    source = tmp_path / "index.md"
    source.write_text("# Index\n", encoding="utf-8")
    assert broken_link(source, "other.md#a-section") is None
    assert broken_link(source, "#index") is None
    assert broken_link(source, "https://example.com/x#y") is None
    assert broken_link(source, "missing.md") == "no such file"
    assert "no heading with the anchor #gone" in str(broken_link(source, "other.md#gone"))
    assert "no heading with the anchor #nowhere" in str(broken_link(source, "#nowhere"))


def test_links_inside_code_are_not_links(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text(
        "# Page\n\n```md\n[a](missing.md)\n```\n\n`[b](missing.md)` and [`c`](page.md#page)\n",
        encoding="utf-8",
    )
    assert list(link_targets(doc)) == [(7, "page.md#page")]


def test_every_relative_link_and_anchor_in_the_docs_resolves() -> None:
    files = doc_files()
    assert ROOT / "README.md" in files
    assert ROOT / "docs" / "README.md" in files
    broken = [
        f"{shown(source)}:{line}: ({target}) {reason}"
        for source in files
        for line, target in link_targets(source)
        if (reason := broken_link(source, target)) is not None
    ]
    assert not broken, "broken links in the documentation:\n" + "\n".join(broken)


def default_text(value: object) -> str:
    """How docs/settings.md writes a default: ``300.0`` as 300, ``False`` as false."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def settings_rows() -> dict[str, list[str]]:
    """The cells of each row of the settings table, by the setting's name (first cell)."""
    rows: dict[str, list[str]] = {}
    for _, line in prose_lines(SETTINGS_DOC.read_text(encoding="utf-8")):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if cells and (name := re.fullmatch(r"`([a-z][a-z0-9_]*)`", cells[0])):
            rows[name.group(1)] = cells
    return rows


def env_names(name: str) -> list[str]:
    """The environment variables a setting is read from: the prefixed name and any aliases."""
    names = [f"{Settings.model_config.get('env_prefix', '')}{name}".upper()]
    alias = Settings.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        names += [c for c in alias.choices if isinstance(c, str) and c.isupper()]
    return list(dict.fromkeys(names))


def test_every_setting_is_documented_with_its_environment_variable_and_default() -> None:
    rows = settings_rows()
    missing: list[str] = []
    for name, field in Settings.model_fields.items():
        row = rows.get(name)
        if row is None or len(row) < 4:
            missing.append(f"{name}: no row `{name}` in the table")
            continue
        for env in env_names(name):
            if f"`{env}`" not in row[1]:
                missing.append(f"{name}: environment variable {env} not in its row")
        if field.default is not None:
            written = row[3].replace("`", "").replace(",", "")
            expected = default_text(field.default)
            if not re.search(rf"(?<![\w.]){re.escape(expected)}(?![\w.])", written):
                missing.append(f"{name}: default {expected} not in its row ({row[3]})")
    assert not missing, "docs/settings.md does not document:\n" + "\n".join(missing)


def test_the_settings_doc_names_no_setting_that_does_not_exist() -> None:
    stale = sorted(set(settings_rows()) - set(Settings.model_fields))
    assert not stale, f"docs/settings.md documents settings Settings does not have: {stale}"


def test_the_readme_stays_a_front_page_with_the_command_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.count("\n")
    assert lines <= 200, f"README.md has {lines} lines: move the detail into docs/ (at most 200)"
    for command in ("make demo", "make test"):
        assert re.search(rf"^{command}\b", readme, re.MULTILINE), f"README lost `{command}`"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test$", ci, re.MULTILINE), ".ci/run no longer runs `make test`"
