"""The docs a user reads stay true to the tree: every relative link and repository path in README.md and docs/*.md
resolves (docs/journal/ may cite history and is not checked), every `pymtp ...` command in their code blocks parses
with pymtp's own argument parser, and the README's set-up commands are the ones .ci/run reads. Pure Python, no model,
no native library: a second or so."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]

# top-level folders of this repository whose paths the docs name in prose and code; other paths (vendor/, build/,
# tools/ui, upstream's src/...) are made by the build or live upstream
ROOTS = ("native", "pymtp", "pymtp_devtools", "bench", "tests", "scripts", "docs", "patches", ".ci")
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)/[\w./+-]*)" % "|".join(re.escape(r) for r in ROOTS))
LINK_RE = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE_RE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
# a path followed by one of these is a pattern or a placeholder (docs/results/NAME, patches/NNNN-*.patch, x.{a,b})
PLACEHOLDER_NEXT = ("*", "{", "<", "NAME", "NNNN", "$")


def rel(page: Path) -> str:
    return str(page.relative_to(REPO))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    body = FENCE_RE.sub("", page.read_text(encoding="utf-8"))
    for line in body.splitlines():
        m = re.match(r"^#{1,6} (.*)", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(page: Path) -> list[str]:
    return LINK_RE.findall(page.read_text(encoding="utf-8"))


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{rel(page)}: link {target} -> {dest} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{rel(page)}: link {target}: no heading with anchor #{anchor} in {rel(dest)}")
        elif not str(dest).startswith(str(REPO)):
            bad.append(f"{rel(page)}: link {target} leaves the repository")
    return bad


def named_paths(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in PATH_RE.finditer(text):
        path = m.group(1)
        if text[m.end():].startswith(PLACEHOLDER_NEXT):
            continue
        path = path.split("::")[0].rstrip(".,;:")
        out.append(path)
    return out


def broken_paths(page: Path) -> list[str]:
    return [f"{rel(page)}: names {p}, which is not in the repository" for p in named_paths(page)
            if not (REPO / p).exists()]


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_resolves(page):
    assert links(page) or page.name != "README.md", "README.md has no links at all?"
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_repository_path_named_exists(page):
    assert broken_paths(page) == []


def cli_examples(page: Path) -> list[str]:
    """`pymtp ...` lines of the page's code blocks (a trailing `# comment` and a leading `$ ` dropped)."""
    out = []
    for block in FENCE_RE.findall(page.read_text(encoding="utf-8")):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():  # a command continued with \ is one line
            line = line.strip().removeprefix("$ ")
            if line.startswith("pymtp "):
                out.append(line)
    return out


def parse_cli(line: str) -> None:
    """Parse a `pymtp ...` line as pymtp.cli.main.main() does, without running it; raises on a usage error."""
    from pymtp.cli.main import build_parser

    argv = shlex.split(line, comments=True)[1:]
    passthrough: list[str] = []
    if "--" in argv:  # `pymtp serve ... -- ARGS`: ARGS go to llama-server
        i = argv.index("--")
        argv, passthrough = argv[:i], argv[i + 1:]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        raise AssertionError(f"`{line}` does not parse (exit {e.code})") from None
    assert not passthrough or hasattr(args, "server_args"), f"`{line}`: only `pymtp serve` passes arguments on"


def test_readme_has_cli_examples():
    assert len(cli_examples(README)) >= 1


@pytest.mark.parametrize("line", [ln for p in PAGES for ln in cli_examples(p)])
def test_cli_example_parses(line, capsys):
    parse_cli(line)


def test_a_bad_cli_example_fails():
    # the check above can fail: a misspelt flag and an unknown subcommand are usage errors
    for line in ("pymtp generate -p hi --n-drafts 3", "pymtp frobnicate model.gguf", "pymtp chat -- --metrics"):
        with pytest.raises(AssertionError):
            parse_cli(line)


def marked_block(text: str, marker: str) -> list[str]:
    """The command lines between <!-- marker --> and <!-- /marker --> (fences dropped), as .ci/run reads them."""
    blocks = re.findall(r"<!-- %s -->\n(.*?)<!-- /%s -->" % (re.escape(marker), re.escape(marker)), text, re.S)
    assert len(blocks) == 1, f"README.md has {len(blocks)} <!-- {marker} --> blocks, CI reads exactly one"
    return [ln for ln in blocks[0].splitlines() if ln.strip() and not ln.startswith("```")]


def test_readme_setup_commands_are_what_ci_runs():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    m = re.search(r"^cmd=\$\((.*)\)$", ci, re.M)
    assert m, ".ci/run no longer reads its command with cmd=$(...): update this test with it"
    marker = re.search(r"<!-- (\S+) -->", m.group(1)).group(1)
    readme = README.read_text(encoding="utf-8")
    ours = marked_block(readme, marker)
    assert ours == ["pip install '.[test]' && pytest"], ours
    # .ci/run's own extraction, run as CI runs it, gives the same command
    got = subprocess.run(["bash", "-c", m.group(1)], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert got.splitlines() == ours
    # and the main job beside it installs the package and runs its chat
    assert marked_block(readme, "main-command") == ["pip install . && pymtp chat"]
    setup = readme.split("## Set-up on a fresh machine", 1)
    assert len(setup) == 2 and f"<!-- {marker} -->" in setup[1].split("\n## ", 1)[0], \
        "the CI command belongs in the README's set-up section"


def test_the_checks_can_fail(tmp_path, monkeypatch):
    # a page with a broken link, a missing path and a missing anchor is reported on all three
    page = tmp_path / "page.md"
    page.write_text("[gone](no-such-file.md) [anchor](#nowhere) `tests/test_no_such_file.py`\n# Here\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert len(broken_links(page)) == 2
    assert broken_paths(page) == ["page.md: names tests/test_no_such_file.py, which is not in the repository"]


def test_slugs_match_github():
    assert slug("Draft vocabulary (`pymtp trim`, `pymtp graft --draft-vocab N`)") == \
        "draft-vocabulary-pymtp-trim-pymtp-graft---draft-vocab-n"
    assert slug("Several slots (llama-server)") == "several-slots-llama-server"
    assert slug("The built-in model's shipped head") == "the-built-in-models-shipped-head"
