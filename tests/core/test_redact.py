"""Redaction of sensitive blocks: every kind is masked, ordinary prose is left alone."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from bot.secrets import EMAIL, HOST_PORT, IP, SECRET, SSH_TARGET, TOKEN, redact

CORPUS = Path(__file__).parent / "data" / "ordinary_sentences.txt"

# One example of each kind: the text, what must vanish, the placeholder that stands instead.
KINDS = [
    ("the box is 10.0.0.1", "10.0.0.1", IP),
    ("the service listens on 192.168.10.20:8080", "192.168.10.20", HOST_PORT),
    ("the database is db.internal.example.com:5432", "db.internal.example.com", HOST_PORT),
    ("the dev server is localhost:3000", "localhost:3000", HOST_PORT),
    ("ssh root@10.0.0.1 to fix it", "root@10.0.0.1", SSH_TARGET),
    ("ssh deploy@web1 to fix it", "deploy@web1", SSH_TARGET),
    ("the link is fe80::1ff:fe23:4567:890a here", "fe80::1ff:fe23:4567:890a", IP),
    ("the proxy is [2001:db8::1]:443", "2001:db8::1", HOST_PORT),
    ("export API_KEY=abc123 first", "abc123", "API_KEY=" + SECRET),
    ('set DB_PASSWORD="hunter two" there', "hunter two", 'DB_PASSWORD="' + SECRET),
    ("password: hunter2", "hunter2", "password: " + SECRET),
    ("my key is sk-proj-abcdefghijklmnop1234", "sk-proj-abcdefghijklmnop1234", TOKEN),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrst", TOKEN),
    ("Authorization: Bearer eyJhbGciOi.x-Y_z123", "eyJhbGciOi", "Bearer " + TOKEN),
    ("write to alice.smith+bots@example.co.uk", "alice.smith+bots@example.co.uk", EMAIL),
    ("hash 3f2a9c0e5b7d4a1f8e6c2b9a0d3f5e7c1a2b3c4d", "3f2a9c0e5b7d4a1f8e6c2b9a0d3f5e7c", SECRET),
    ("blob Zm9vYmFyLWJhei1xdXV4LTEyMzQ1Njc4OTBBQkNERUY=", "Zm9vYmFyLWJhei1xdXV4", SECRET),
    ("aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE", SECRET),
    ("-----BEGIN OPENSSH PRIVATE KEY-----", "BEGIN OPENSSH PRIVATE KEY", SECRET),
    ("password: letmein", "letmein", "password: " + SECRET),
    ("my password is hunter2", "hunter2", "my password is " + SECRET),
    ("db pass = swordfish", "swordfish", "db pass = " + SECRET),
    ("curl -u admin:hunter2 https://example.com", "admin:hunter2", "-u " + SECRET),
    ("export api_key=abc", "abc", "api_key=" + SECRET),
    ("open https://user:pw@host/x", "user:pw", SECRET),
    ("the box is 192.168.001.001", "192.168.001.001", IP),
]


@pytest.mark.parametrize(("text", "hidden", "placeholder"), KINDS, ids=[k[1] for k in KINDS])
def test_each_kind_is_masked_by_its_placeholder(text: str, hidden: str, placeholder: str) -> None:
    masked = redact(text)
    assert hidden not in masked
    assert placeholder in masked


def test_the_sticky_context_example_reaches_nobody_whole() -> None:
    assert redact("API_KEY=abc123 ssh root@10.0.0.1") == f"API_KEY={SECRET} ssh {SSH_TARGET}"


def test_redacting_twice_changes_nothing() -> None:
    once = redact(" ".join(text for text, _, _ in KINDS))
    assert redact(once) == once


def _ordinary_sentences() -> list[str]:
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def test_ordinary_prose_is_never_redacted() -> None:
    sentences = _ordinary_sentences()
    assert len(sentences) >= 200
    changed = [sentence for sentence in sentences if redact(sentence) != sentence]
    assert changed == []


def _secrets(count_per_kind: int) -> list[tuple[str, str]]:
    """Secrets of every listed kind, made from a fixed seed: (sentence, the secret in it)."""
    rng = random.Random(37)

    def word(length: int, alphabet: str = string.ascii_lowercase) -> str:
        return "".join(rng.choice(alphabet) for _ in range(length))

    def octet() -> str:
        return str(rng.randint(1, 254))

    b64 = string.ascii_letters + string.digits + "+/"
    makers = [
        lambda: ".".join(octet() for _ in range(4)),
        lambda: ".".join(octet() for _ in range(4)) + f":{rng.randint(1, 65535)}",
        lambda: f"{word(6)}.{word(5)}.com:{rng.randint(1024, 65535)}",
        lambda: f"{word(5)}@" + ".".join(octet() for _ in range(4)),
        lambda: f"{word(4)}@{word(6)}{rng.randint(1, 99)}",
        lambda: f"{word(6)}.{word(4)}@{word(7)}.org",
        lambda: f"{word(5, string.ascii_uppercase)}_TOKEN={word(12, b64[:62])}",
        lambda: "sk-" + word(32, string.ascii_letters + string.digits),
        lambda: "ghp_" + word(36, string.ascii_letters + string.digits),
        lambda: "Bearer " + word(40, string.ascii_letters + string.digits + "._-"),
        lambda: word(40, "0123456789abcdef"),
        lambda: word(44, b64) + "==",
        lambda: "2001:db8:" + ":".join(f"{rng.randint(0, 65535):x}" for _ in range(6)),
    ]
    # Secrets as people tell them: (the text, the secret in it).
    told = [
        lambda: (f"password: {word(8)}", None),
        lambda: (f"my password is {word(9)}", None),
        lambda: (f"db pass = {word(9)}", None),
        lambda: (f"export api_key={word(3)}", None),
        lambda: (f"curl -u {word(5)}:{word(8)} {word(6)}.com", 2),
        lambda: (".".join(f"{rng.randint(0, 255):03d}" for _ in range(4)), 0),
    ]
    made = []
    for tell in told:
        for _ in range(count_per_kind):
            text, part = tell()
            words = text.split()
            hidden = words[-1] if part is None else words[part] if part else text
            made.append((f"Remember {text} for the deploy.", hidden))
    for maker in makers:
        for _ in range(count_per_kind):
            secret = maker()
            hidden = secret.removeprefix("Bearer ").split("=", 1)[-1]
            made.append((f"Remember {secret} for the deploy.", hidden))
    return made


def test_no_secret_of_a_listed_kind_is_missed() -> None:
    secrets = _secrets(count_per_kind=10)
    assert len(secrets) >= 100
    missed = [sentence for sentence, hidden in secrets if hidden in redact(sentence)]
    assert missed == []
