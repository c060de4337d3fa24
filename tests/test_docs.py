"""The docs hold up: every relative link in README.md and docs/*.md leads somewhere, and the
operator's guide's TLS recipe makes a CA and a certificate that a TLS client verifies."""

from __future__ import annotations

import re
import shlex
import shutil
import ssl
import tomllib
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OPERATING = ROOT / "docs" / "operating.md"

_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The text without its fenced code blocks (a '#' comment there is no heading, a [x](y) no link)."""
    return _FENCE.sub("", text)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|<[^>]+>", "", heading).strip().lower()  # markup is not part of the anchor
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for match in _HEADING.finditer(prose(path.read_text())):
        slug = anchor(match.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")  # a repeated heading gets -1, -2, ...
    return out


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(prose(path.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...: not ours to check
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{path.name}: {target}: no such file")
        elif fragment and (dest.is_dir() or dest.suffix != ".md" or fragment not in anchors(dest)):
            broken.append(f"{path.name}: {target}: no heading #{fragment} in {dest.name}")
    return broken


def test_the_anchor_of_a_heading_is_githubs():
    assert anchor("High availability on PostgreSQL") == "high-availability-on-postgresql"
    assert anchor("Reading a job's history") == "reading-a-jobs-history"
    assert anchor("Histories, agent names and identities") == "histories-agent-names-and-identities"
    assert anchor("`reckon` and the `--json` output") == "reckon-and-the---json-output"


def test_every_relative_link_in_the_docs_points_to_a_file_and_heading_that_exist():
    assert len(DOCS) > 5
    assert not [b for path in DOCS for b in broken_links(path)]


def test_a_broken_link_is_caught(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n")
    page.write_text("# Page\n\n[ok](other.md#a-part) [self](#page) [web](https://example.org/x)\n"
                    "[gone](missing.md) [no part](other.md#b-part) [no self](#nowhere)\n"
                    "```sh\n# not a heading, and [not](a-link.md)\n```\n")
    assert broken_links(page) == [
        "page.md: missing.md: no such file",
        "page.md: other.md#b-part: no heading #b-part in other.md",
        "page.md: #nowhere: no heading #nowhere in page.md",
    ]


def tls_recipe() -> str:
    """The operator's guide's openssl recipe: the shell block of its TLS section that starts with SAN=."""
    section = OPERATING.read_text().split("\n## TLS\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S)
    (recipe,) = [b for b in blocks if b.startswith("SAN=")]
    return recipe


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str) -> None:
    """One TLS handshake in memory; raises ssl.SSLError (a CertificateError) if the client refuses."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {c: False, s: False}
    for _ in range(20):
        for side in (c, s):
            if not done[side]:
                try:
                    side.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not finish")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_the_tls_recipe_makes_a_certificate_that_a_client_trusting_its_ca_verifies(tmp_path):
    recipe = tls_recipe()
    assert recipe.startswith("SAN=DNS:controller.example ")
    # As an operator whose agents and clients reach the controller as localhost or 127.0.0.1.
    script = recipe.replace("SAN=DNS:controller.example", "SAN=DNS:localhost,IP:127.0.0.1", 1)
    run = subprocess.run(["sh", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "controller.pem: OK" in run.stdout
    for secret in ("ca.key", "controller.key"):
        assert (tmp_path / secret).stat().st_mode & 0o077 == 0, secret

    # The contexts reckon builds: the controller's (daemon/controller/tls.py) and a client's with --ca.
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.minimum_version = ssl.TLSVersion.TLSv1_2
    server.load_cert_chain(tmp_path / "controller.pem", tmp_path / "controller.key")
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    for name in ("localhost", "127.0.0.1"):
        handshake(server, client, name)
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):  # a name the certificate lacks
        handshake(server, client, "controller.example")
    with pytest.raises(ssl.SSLCertVerificationError):  # a client that does not trust the CA
        handshake(server, ssl.create_default_context(), "localhost")


# Shell words in the docs' examples that stand for a value the reader's machine supplies.
_SHELL_VALUES = {'"$(hostname)"': "node1", '"$(nproc)"': "8"}


def documented_commands(path: Path) -> list[list[str]]:
    """Every `reckon ...` command line in a doc's sh/bash blocks, as argv after `reckon`."""
    commands = []
    for block in re.findall(r"^```(?:sh|bash)\n(.*?)^```", path.read_text(), re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0]
            for word, value in _SHELL_VALUES.items():
                line = line.replace(word, value)
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            part: list[str] = []
            for token in [*lexer, ";"]:
                if token not in ("|", "||", "&&", ";", "&"):
                    part.append(token)
                    continue
                words = part[:next((i for i, w in enumerate(part) if w in ("<", ">", ">>")), len(part))]
                while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # VAR=value before the command
                    words.pop(0)
                if words and Path(words[0]).name == "reckon":
                    commands.append(words[1:])
                part = []
    return commands


def test_every_reckon_command_the_docs_show_parses():
    from reckon.daemon.cli.main import build_parser

    shown = {path.name: documented_commands(path) for path in (ROOT / "README.md", OPERATING)}
    assert len(shown["README.md"]) >= 15 and len(shown["operating.md"]) >= 8, shown
    refused = []
    for name, commands in shown.items():
        for argv in commands:
            try:
                build_parser().parse_args(argv)
            except SystemExit:
                refused.append(f"{name}: reckon {shlex.join(argv)}")
    assert not refused


def test_the_guides_config_file_is_the_example_shipped_with_the_units_and_it_checks(tmp_path, capsys):
    from reckon.daemon.cli.main import main

    (shown,) = re.findall(r"^```toml\n(.*?)^```", OPERATING.read_text(), re.M | re.S)
    example = ROOT / "contrib" / "systemd" / "reckon.toml.example"
    assert tomllib.loads(shown) == tomllib.loads(example.read_text())
    (tmp_path / "reckon.toml").write_text(shown)
    assert main(["config", "check", str(tmp_path / "reckon.toml")]) == 0
    assert "OK: [controller]" in capsys.readouterr().out


def test_the_readme_names_every_profile_ci_runs():
    """README's "How it is checked" lists the profiles `.ci/run` runs: a profile CI added and the
    README left out is a claim ("both run by CI") that no longer holds."""
    ci = (ROOT / ".ci" / "run").read_text()
    targets = re.findall(r"^\s*make ([\w-]+)", ci, re.M)
    assert targets, "no make targets in .ci/run"
    section = ROOT.joinpath("README.md").read_text().partition("## How it is checked")[2].partition("\n## ")[0]
    missing = [t for t in targets if f"`make {t}`" not in section]
    assert not missing, f"README's 'How it is checked' does not name: {missing}"


def test_the_readme_says_import_reckon_is_the_python_client():
    # It said "`import reckon` has no client API yet" after reckon.Client had landed.
    import reckon

    text = (ROOT / "README.md").read_text()
    assert "no client API" not in text
    assert "`import reckon` is the Python client" in text and callable(reckon.Client)
