"""The README's quickstart runs as written, against the local S3 (sync and async snippets);
every ``s3log`` command line in the README and docs/ names real commands and options."""

from __future__ import annotations

import re
from pathlib import Path

import s3log
from s3log.testing.plugin import LocalS3

README = Path(__file__).resolve().parent.parent / "README.md"


def _quickstart_blocks() -> list[str]:
    text = README.read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_quickstart_runs_as_written(s3log_server: LocalS3) -> None:
    # The snippets name "my-bucket" and take the endpoint from AWS_ENDPOINT_URL, which
    # the s3log_server fixture points at the local server.
    s3log_server.client().create_bucket(Bucket="my-bucket")
    sync_block, async_block = _quickstart_blocks()[:2]
    scope: dict[str, object] = {}
    exec(compile(sync_block, "README.md (quickstart)", "exec"), scope)
    child = scope["child"]
    assert isinstance(child, str) and s3log.Log(s3log.S3Store("my-bucket")).read(child).seed is not None
    # As pasted into a file or `python -`: no top-level await (a SyntaxError outside a notebook).
    ascope: dict[str, object] = {"__name__": "__main__"}
    exec(compile(async_block, "README.md (async)", "exec"), ascope)
    entries = ascope["entries"]
    assert [e.data for e in entries] == list(range(100))  # type: ignore[attr-defined]


# ------------------------------------------------------------------ the command line

DOCS = [README, *sorted((README.parent / "docs").rglob("*.md"))]


def _cli_commands(text: str) -> list[str]:
    """Every ``s3log ...`` command line a document shows: in its ``sh`` blocks (an
    indented line continues the one before; ``#`` starts a comment) and code spans."""
    out: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines: list[str] = []
        for line in block.splitlines():
            line = line.split(" #", 1)[0].rstrip()
            if line.startswith(" ") and lines:
                lines[-1] += " " + line.strip()
            elif line:
                lines.append(line)
        out += lines
    out += re.findall(r"`([^`\n]+)`", text)
    return [c for c in out if re.match(r"s3log\s+[-a-z]", c)]


def test_every_command_line_in_the_docs_names_real_commands_and_options() -> None:
    import click
    import typer

    from s3log.cli.app import app

    root = typer.main.get_command(app)
    ctx = click.Context(root)
    global_opts = {o for p in root.params for o in p.opts}
    options = {name: {o for p in root.get_command(ctx, name).params for o in (*p.opts, *p.secondary_opts)}
               for name in root.list_commands(ctx)}  # type: ignore[union-attr]
    seen, wrong = 0, []
    for doc in DOCS:
        for line in _cli_commands(doc.read_text(encoding="utf-8")):
            words = line.split()[1:]
            while words and words[0].startswith("-"):  # global options (and their values) first
                opt = words.pop(0)
                if opt not in global_opts:
                    wrong.append(f"{doc.name}: {line!r}: {opt} is not a global option")
                elif words and not words[0].startswith("-") and opt not in ("--debug", "--version"):
                    words.pop(0)
            if not words:
                continue
            name, rest = words[0], " ".join(words[1:])
            if name not in options:
                wrong.append(f"{doc.name}: {line!r}: no command {name}")
                continue
            seen += 1
            for opt in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", rest):
                if opt not in options[name] | global_opts | {"--help"}:
                    wrong.append(f"{doc.name}: {line!r}: {name} has no option {opt}")
    assert seen > 30 and not wrong, "\n".join(wrong)
    # What the README says: every command but these two takes --json.
    assert sorted(n for n, opts in options.items() if "--json" not in opts) == ["export", "local-s3"]
    assert "Every command but `export` and `local-s3` takes `--json`" in " ".join(README.read_text().split())
