"""The docs a reader follows: every command README.md and docs/*.md show answers `--help`, every
relative link lands on a file (and its anchor on a heading there), and the README and
docs/architecture.md draw the same flow."""

import argparse
import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

from leap_pipeline.app.cli import main

PROJECT = Path(__file__).resolve().parents[1]
PAGES = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]
# the changelog may name a command as it was before a release renamed or removed it: its links
# are checked, its commands are history
CHANGELOG = PROJECT / "docs" / "changelog.md"
SHELLS = {"bash", "sh", "shell", "console", "zsh"}
SCRIPT = re.compile(r"(?:\./)?(?:benchmarks|scripts)/\w+\.py")
PYTHON = re.compile(r"(?:\S*/)?python(?:3(?:\.\d+)?)?")
SUBCOMMAND = re.compile(r"[a-z][a-z0-9-]*")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")


def split_page(text: str) -> tuple[list[tuple[str, str]], str]:
    """A page's fenced blocks as (info string, body), and its prose with the blocks blanked."""
    blocks, prose, fence, info, body = [], [], None, "", []
    for line in text.splitlines():
        opening = re.match(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)", line)
        if fence is None and opening:
            fence, info, body = opening.group(1), opening.group(2).lower(), []
            prose.append("")
        elif fence is not None and re.match(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$", line):
            blocks.append((info, "\n".join(body)))
            fence = None
            prose.append("")
        elif fence is not None:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    return blocks, "\n".join(prose)


def _words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: not a command line
        return []


def commands_in(text: str) -> set[tuple[str, ...]]:
    """What a shell line or a code span runs: ("leap", subcommand, ...) for the CLI, with the
    leading words that name subcommands, or ("script", path) for a benchmark or script."""
    found = set()
    for line in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"^\s*\$\s+", "", line)
        words, part = _words(line), []
        for word in [*words, ";"]:
            if word not in {"&&", "||", ";", "|", "&", "(", ")"}:
                part.append(word)
                continue
            while part and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", part[0]):  # VAR=value cmd
                part.pop(0)
            if part and (part[0] == "leap" or part[0].endswith("/bin/leap")):
                path = []
                for sub in part[1:]:
                    if not SUBCOMMAND.fullmatch(sub):
                        break
                    path.append(sub)
                if path:
                    found.add(("leap", *path))
            elif part and PYTHON.fullmatch(part[0]) and len(part) > 1 and SCRIPT.fullmatch(part[1]):
                found.add(("script", part[1].removeprefix("./")))
            elif part and SCRIPT.fullmatch(part[0]):
                found.add(("script", part[0].removeprefix("./")))
            part = []
    return found


def documented_commands(pages: list[Path]) -> dict[tuple[str, ...], str]:
    """Every command the pages show, with the first page that shows it."""
    found: dict[tuple[str, ...], str] = {}
    for page in pages:
        blocks, prose = split_page(page.read_text())
        texts = [body for info, body in blocks if info in SHELLS]
        texts += [m.group(2) for m in CODE_SPAN.finditer(prose)]
        for text in texts:
            for command in commands_in(text):
                found.setdefault(command, page.name)
    return found


def leap_help(path: tuple[str, ...]) -> tuple[int, str]:
    """`leap <path> --help` in this process: its exit code and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([*path, "--help"])
        except SystemExit as stop:
            code = stop.code
    return (0 if code is None else code), out.getvalue() + err.getvalue()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    _, prose = split_page(page.read_text())
    seen: Counter[str] = Counter()
    found = set()
    for line in prose.splitlines():
        if heading := HEADING.match(line):
            base = slug(heading.group(2))
            found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
            seen[base] += 1
    found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", prose))
    return found


def broken_links(pages: list[Path], root: Path = PROJECT) -> list[str]:
    """Every relative link of the pages that names no file, or a heading its file lacks."""
    broken = []
    for page in pages:
        _, prose = split_page(page.read_text())
        prose = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), prose)
        targets = [m.group(1) for m in LINK.finditer(prose)]
        targets += [m.group(1) for m in REFERENCE.finditer(prose)]
        for target in targets:
            if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|//", target):
                continue  # http(s), mailto: not this test's business
            path, _, anchor = unquote(target).partition("#")
            file = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}: ({target})"
            if not file.exists():
                broken.append(f"{where}: no such file")
            elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
                broken.append(f"{where}: no heading #{anchor} in {file.name}")
    return broken


COMMANDS = documented_commands([page for page in PAGES if page != CHANGELOG])
LEAP = sorted(c[1:] for c in COMMANDS if c[0] == "leap")
SCRIPTS = sorted(c[1] for c in COMMANDS if c[0] == "script")


@pytest.mark.parametrize("path", LEAP, ids=[" ".join(p) for p in LEAP])
def test_every_leap_command_the_docs_show_answers_help(path):
    code, printed = leap_help(path)
    assert code == 0, (COMMANDS[("leap", *path)], printed[-2000:])
    # every word taken for a subcommand is one: the help is that command's own
    assert re.match(rf"usage: leap {' '.join(path)}(\s|$)", printed), printed[:300]


# every script's ``--help``, in one interpreter: each script was a process of its own (25 of
# them, nearly all the time importing the same libraries 25 times). Each still runs as
# ``python SCRIPT --help`` runs it: as ``__main__``, its own folder first on sys.path, argv[0]
# its path. What one script leaves is undone before the next: the environment, sys.path, and
# every module imported from the scripts' folders (a sibling module must be found by the
# script that needs it, not left by another); the libraries stay imported. Its exit code, and
# its exit message or error with what it wrote to stderr, are kept per script
HELP_ALL = """
import contextlib, io, json, os, runpy, sys
folders = ("benchmarks", "scripts")
answers = {}
for script in sys.argv[1:]:
    out, err = io.StringIO(), io.StringIO()
    environment, path = dict(os.environ), list(sys.path)
    sys.argv = [script, "--help"]
    sys.path.insert(0, os.path.abspath(os.path.dirname(script)))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        if not isinstance(exit.code, int) and exit.code is not None:
            err.write(str(exit.code))
    except BaseException as error:
        code = 1
        err.write(repr(error))
    os.environ.clear()
    os.environ.update(environment)
    sys.path[:] = path
    for name, module in list(sys.modules.items()):
        where = os.path.relpath(getattr(module, "__file__", None) or "/", os.getcwd())
        if where.split(os.sep)[0] in folders:
            del sys.modules[name]
    answers[script] = [code, err.getvalue()[-1000:]]
print(json.dumps(answers))
"""


def test_every_script_the_docs_show_answers_help():
    done = subprocess.run(
        [sys.executable, "-c", HELP_ALL, *SCRIPTS],
        capture_output=True, text=True, cwd=PROJECT, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(answers) == sorted(SCRIPTS)
    failed = {
        script: (COMMANDS[("script", script)], stderr)
        for script, (code, stderr) in answers.items()
        if code != 0
    }
    assert failed == {}


def test_the_docs_show_every_leap_command():
    """The command reference covers the CLI: each of `leap`'s commands is shown at least once,
    so the two tests above have something to run."""
    code, printed = leap_help(())
    listed = re.search(r"\{([\w,-]+)\}", printed)
    assert code == 0 and listed, printed
    assert set(listed.group(1).split(",")) <= {path[0] for path in LEAP}
    assert SCRIPTS, "no benchmark found in the docs"


def test_every_relative_link_resolves():
    assert broken_links(PAGES) == []


def test_the_checks_catch_what_they_are_for(tmp_path):
    """A broken link, a missing anchor and a command the CLI lacks each fail."""
    (tmp_path / "other.md").write_text("# Other page\n\n## A heading: `with code`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\nSee [ok](other.md#a-heading-with-code), [gone](missing.md),\n"
        "[bad anchor](other.md#no-such-heading) and [here](#page).\n\n"
        "```bash\n.venv/bin/leap no-such-command --flag\nLEAP_DATA=x leap fleet stats --json\n```\n"
        "Inline: `python benchmarks/train_cascade.py --json`, and `leap` alone is no command.\n"
    )
    assert broken_links([page], root=tmp_path) == [
        "page.md: (missing.md): no such file",
        "page.md: (other.md#no-such-heading): no heading #no-such-heading in other.md",
    ]
    assert set(documented_commands([page])) == {
        ("leap", "no-such-command"),
        ("leap", "fleet", "stats"),
        ("script", "benchmarks/train_cascade.py"),
    }
    assert leap_help(("no-such-command",))[0] == 2
    assert leap_help(("fleet", "stats"))[0] == 0


def test_the_readme_and_the_architecture_page_draw_the_same_flow():
    def diagrams(page: Path) -> list[str]:
        return [body for info, body in split_page(page.read_text())[0] if info == "mermaid"]

    readme = diagrams(PROJECT / "README.md")
    architecture = diagrams(PROJECT / "docs" / "architecture.md")
    assert len(readme) == 1 and architecture == readme


def test_the_readme_stays_short():
    assert len((PROJECT / "README.md").read_text().splitlines()) <= 250


def unlinked_pages(docs: Path, readme: str) -> list[str]:
    """The pages of ``docs`` the README text ``readme`` links to nowhere."""
    pages = sorted(p.name for p in docs.glob("*.md"))
    return [p for p in pages if f"](docs/{p}" not in readme]


def test_every_docs_page_is_linked_from_the_readme():
    """A page no one can find from the README drifts unread (docs/transfer.md was one)."""
    readme = (PROJECT / "README.md").read_text()
    assert list((PROJECT / "docs").glob("*.md")) and unlinked_pages(PROJECT / "docs", readme) == []


def unnamed_modules(root: Path, page: str) -> list[str]:
    """The modules of ``leap_pipeline`` and ``leap_serving`` under ``root`` whose file name
    (``name.py``) the architecture page's text ``page`` never gives."""
    return [
        str(path.relative_to(root))
        for package in ("leap_pipeline", "leap_serving")
        for path in sorted((root / package).rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py")
        and "simulation" not in path.parts  # the simulator's four modules, named together
        and not re.search(rf"(?<![\w/.]){re.escape(path.name)}(?!\w)", page)
    ]


def test_every_module_is_named_on_the_architecture_page():
    """A module added without its line on docs/architecture.md fails here (7 were missing)."""
    page = (PROJECT / "docs" / "architecture.md").read_text()
    assert unnamed_modules(PROJECT, page) == []


def cli_flags(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict:
    """Every command path of ``parser`` (``()`` for ``leap`` itself) -> its long flags."""
    found = {
        path: {
            flag
            for action in parser._actions
            for flag in action.option_strings
            if flag.startswith("--") and flag != "--help"
        }
    }
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(cli_flags(sub, (*path, name)))
    return found


def documented_flags(text: str) -> dict[tuple[str, ...], set[str]]:
    """The flags each ``leap ...`` code span of ``text`` shows, by the command words that open
    it (bracketed options skipped: ``leap model [--data DIR] promote`` is model promote's)."""
    found: dict[tuple[str, ...], set[str]] = {}
    for match in CODE_SPAN.finditer(text):
        span = " ".join(match.group(2).split())
        if not span.startswith("leap "):
            continue
        bare = span
        while re.search(r"\[[^\[\]]*\]", bare):
            bare = re.sub(r"\[[^\[\]]*\]", " ", bare)
        words: list[str] = []
        for word in bare.split()[1:]:
            if not SUBCOMMAND.fullmatch(word):
                break
            words.append(word)
        found.setdefault(tuple(words), set()).update(re.findall(r"--[a-z][a-z0-9-]*", span))
    return found


def undocumented_flags(parser: argparse.ArgumentParser, text: str) -> dict:
    """Command path -> the flags its ``--help`` lists that no span of ``text`` for it (or for
    one of its sub-commands) shows."""
    shown = documented_flags(text)
    missing = {}
    for path, flags in cli_flags(parser).items():
        documented = set().union(*(f for p, f in shown.items() if p[: len(path)] == path))
        if flags - documented:
            missing[path] = sorted(flags - documented)
    return missing


def test_every_flag_in_help_is_in_the_command_reference():
    from leap_pipeline.app.cli import build_parser

    text = (PROJECT / "docs" / "commands.md").read_text()
    assert undocumented_flags(build_parser(), text) == {}


def test_the_drift_checks_fail_on_what_they_guard(tmp_path):
    """A page, a module and a flag each added without its doc are reported."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n")
    (tmp_path / "docs" / "new.md").write_text("# New\n")
    assert unlinked_pages(tmp_path / "docs", "see [a](docs/a.md)") == ["new.md"]
    for name in ("leap_pipeline/app/old.py", "leap_serving/http/brand_new.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    page = "app/: old.py (the old one); `new.py` is not `brand_new.py`'s name: old_brand_new.py"
    assert unnamed_modules(tmp_path, page.replace("`brand_new.py`", "it")) == [
        "leap_serving/http/brand_new.py"
    ]
    parser = argparse.ArgumentParser(prog="leap")
    sub = parser.add_subparsers().add_parser("model").add_subparsers()
    sub.add_parser("promote").add_argument("--reason")
    sub.add_parser("unpin").add_argument("--dry-run")
    text = "`leap model [--data DIR] promote VERSION [--reason TEXT]` and `leap model unpin`"
    assert undocumented_flags(parser, text) == {("model", "unpin"): ["--dry-run"]}
