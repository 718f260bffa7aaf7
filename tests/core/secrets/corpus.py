"""A labelled corpus of secrets and ordinary pinned lines, to measure the recogniser (issue 44).

SECRETS holds lines that carry a credential (refused in group blocks) or an address (hidden only
in sensitive blocks); ORDINARY holds lines people pin as rules, preferences and notes, none of
which may be taken for a secret. Every value is synthetic, drawn from a random.Random with a fixed
seed, so the corpus is the same on every import; the values have the real lengths, alphabets and
prefixes of each provider, because detectors with a learned filter ignore values that look fake.
No value here is a real credential.
"""

from __future__ import annotations

import base64
import json
import random
import string
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Secret:
    """One line holding a secret, as people pin it."""

    kind: str
    """A short slug of the shape, e.g. "aws-access-key", "password-prose-zh", "ipv4"."""
    line: str
    """The whole line as a person would pin it (a PEM key is one multi-line string)."""
    hidden: tuple[str, ...]
    """Substrings that must not survive redaction: the value itself; for a PEM or OpenSSH key,
    its body lines and END line."""
    credential: bool
    """True: refused in group blocks. False: an address (IPv4, IPv6, host:port, user@host,
    e-mail), hidden only in sensitive blocks."""


@dataclass(frozen=True, slots=True)
class Ordinary:
    """One ordinary line people pin: nothing in it is a secret."""

    kind: str
    """E.g. "version", "date", "price", "setting", "path", "url", "clone-url", "zh-note"."""
    line: str


_SEED = 44

UPPER = string.ascii_uppercase
LOWER = string.ascii_lowercase
DIGITS = string.digits
ALNUM = UPPER + LOWER + DIGITS
UPPER_DIGITS = UPPER + DIGITS
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"
SYMBOLS = "!#$%&*^?"

# Substrings that make a value look made up; a drawn value holding one is drawn again.
_FAKE_LOOKING = ("example", "test", "fake", "dummy", "sample", "xxx", "1234", "abcd", "0000")

_WORDS = (
    "Maple",
    "Harbor",
    "Falcon",
    "Copper",
    "Willow",
    "Quartz",
    "Ember",
    "Cedar",
    "Orbit",
    "Juniper",
    "Saffron",
    "Tundra",
    "Velvet",
    "Marble",
    "Cobalt",
    "Lantern",
    "Pepper",
    "Summit",
    "Thistle",
    "Walnut",
    "Glacier",
    "Meadow",
    "Raven",
    "Comet",
)


class _Draw:
    """Values that look real, drawn from one seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def chars(self, alphabet: str, length: int) -> str:
        """A value of the alphabet that mixes its letter cases and digits, starts and ends with a
        letter or digit, and holds nothing that looks made up."""
        while True:
            value = "".join(self.rng.choices(alphabet, k=length))
            if _plausible(value, alphabet):
                return value

    def digits(self, length: int) -> str:
        """A number of the length, without a leading zero, a run or a repeated digit."""
        while True:
            value = str(self.rng.randrange(10 ** (length - 1), 10**length))
            if _plausible_number(value):
                return value

    def hex(self, length: int) -> str:
        return self.chars(HEX, length)

    def b64(self, size: int) -> str:
        return base64.b64encode(self.rng.randbytes(size)).decode()

    def b64url(self, size: int) -> str:
        return base64.urlsafe_b64encode(self.rng.randbytes(size)).decode().rstrip("=")

    def password(self) -> str:
        """A password as people choose them: two words and digits, a random mixture with
        symbols, or a lowercase word with digits and capitals."""
        rng = self.rng
        style = rng.randrange(3)
        if style == 0:
            first, second = rng.sample(_WORDS, 2)
            return f"{first}{rng.choice(SYMBOLS)}{second}{rng.randint(10, 99)}"
        if style == 1:
            while True:
                value = self.chars(ALNUM + SYMBOLS, rng.randint(10, 16))
                if any(c in SYMBOLS for c in value):
                    return value
        first, second = rng.sample(_WORDS, 2)
        return f"{first.lower()}{self.digits(rng.randint(3, 4))}{second.upper()[:3]}"

    def url_password(self) -> str:
        return self.chars(ALNUM, self.rng.randint(14, 24))

    def pin(self) -> str:
        return self.digits(self.rng.choice((4, 4, 4, 6)))


def _plausible(value: str, alphabet: str) -> bool:
    if not (value[0].isalnum() and value[-1].isalnum()):
        return False
    folded = value.lower()
    if any(word in folded for word in _FAKE_LOOKING):
        return False
    if len(value) >= 8:
        for kind in (UPPER, LOWER, DIGITS):
            if set(kind) & set(alphabet) and not set(kind) & set(value):
                return False
    return True


def _plausible_number(value: str) -> bool:
    steps = {int(b) - int(a) for a, b in pairwise(value)}
    return len(set(value)) > 2 and steps not in ({1}, {-1}, {0})


# ---------------------------------------------------------------------------------------------
# Provider values


def _aws_access_key(d: _Draw) -> str:
    return d.rng.choice(("AKIA", "AKIA", "ASIA")) + d.chars(UPPER_DIGITS, 16)


def _aws_secret_key(d: _Draw) -> str:
    return d.chars(B64, 40)


def _github_token(d: _Draw) -> str:
    return d.rng.choice(("ghp_", "ghp_", "gho_", "ghs_", "ghu_")) + d.chars(ALNUM, 36)


def _github_pat(d: _Draw) -> str:
    return "github_pat_11" + d.chars(UPPER_DIGITS, 20) + "_" + d.chars(ALNUM, 59)


def _gitlab_token(d: _Draw) -> str:
    return "glpat-" + d.chars(URLSAFE, 20)


def _slack_token(d: _Draw) -> str:
    if d.rng.random() < 0.5:
        return f"xoxb-{d.digits(11)}-{d.digits(13)}-{d.chars(ALNUM, 24)}"
    return f"xoxp-{d.digits(11)}-{d.digits(11)}-{d.digits(13)}-{d.hex(32)}"


def _slack_webhook_path(d: _Draw) -> tuple[str, str]:
    """The webhook URL and its secret last part."""
    last = d.chars(ALNUM, 24)
    team = "T" + d.chars(UPPER_DIGITS, d.rng.choice((8, 10)))
    channel = "B" + d.chars(UPPER_DIGITS, d.rng.choice((8, 10)))
    return f"https://hooks.slack.com/services/{team}/{channel}/{last}", last


def _stripe_key(d: _Draw) -> str:
    prefix = d.rng.choice(("sk_live_", "sk_live_", "sk_test_", "rk_live_"))
    length = d.rng.choice((24, 34, 99))
    if length == 99:
        return prefix + "51" + d.chars(ALNUM, 97)
    return prefix + d.chars(ALNUM, length)


def _stripe_webhook_secret(d: _Draw) -> str:
    return "whsec_" + d.chars(ALNUM, 32)


def _openai_key(d: _Draw) -> str:
    if d.rng.random() < 0.5:
        return "sk-proj-" + d.chars(URLSAFE, 74) + "T3BlbkFJ" + d.chars(URLSAFE, 74)
    return "sk-" + d.chars(ALNUM, 20) + "T3BlbkFJ" + d.chars(ALNUM, 20)


def _anthropic_key(d: _Draw) -> str:
    return "sk-ant-api03-" + d.chars(URLSAFE, 93) + "AA"


def _google_api_key(d: _Draw) -> str:
    return "AIza" + d.chars(URLSAFE, 35)


def _npm_token(d: _Draw) -> str:
    return "npm_" + d.chars(ALNUM, 36)


def _sendgrid_key(d: _Draw) -> str:
    return "SG." + d.chars(URLSAFE, 22) + "." + d.chars(URLSAFE, 43)


def _discord_token(d: _Draw) -> str:
    # The first part is the bot's 18-digit id in base64, so it starts with M, N or O.
    user_id = d.digits(18)
    first = base64.b64encode(user_id.encode()).decode()
    return f"{first}.{d.chars(URLSAFE, 6)}.{d.chars(URLSAFE, 27)}"


def _telegram_token(d: _Draw) -> str:
    return f"{d.digits(d.rng.choice((8, 9, 10)))}:AA{d.chars(URLSAFE, 33)}"


def _jwt(d: _Draw, *, rs256: bool = False) -> str:
    rng = d.rng
    header = {"alg": "RS256" if rs256 else "HS256", "typ": "JWT"}
    issued = rng.randrange(1_700_000_000, 1_760_000_000)
    payload = {
        "sub": d.digits(rng.choice((6, 8))),
        "name": rng.choice(("Mia Chen", "Jonas Berg", "Priya Nair", "Tom Okafor", "Lena Vogt")),
        "role": rng.choice(("admin", "editor", "viewer", "service")),
        "iat": issued,
        "exp": issued + rng.choice((900, 3600, 86400)),
    }

    def part(data: Mapping[str, object]) -> str:
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    return f"{part(header)}.{part(payload)}.{d.b64url(256 if rs256 else 32)}"


def _opaque_token(d: _Draw) -> str:
    return d.chars(ALNUM, d.rng.choice((32, 40, 48)))


# ---------------------------------------------------------------------------------------------
# Keys


def _wrap(text: str, width: int) -> list[str]:
    return [text[i : i + width] for i in range(0, len(text), width)]


def _rsa_der(d: _Draw, *, pkcs8: bool) -> bytes:
    """The bytes of a 2048-bit RSA key: a real header, random numbers."""
    modulus = bytes([d.rng.randrange(0xC0, 0x100)]) + d.rng.randbytes(255)
    head = bytes.fromhex("0201000282010100") + modulus + bytes.fromhex("0203010001")
    rsa = bytes.fromhex("308204a3") + head + d.rng.randbytes(0x04A3 - len(head))
    if not pkcs8:
        return rsa
    algorithm = bytes.fromhex("300d06092a864886f70d0101010500")
    inner = bytes.fromhex("020100") + algorithm + bytes.fromhex("048204a7") + rsa
    return bytes.fromhex("308204bd") + inner


def _ec_der(d: _Draw, *, pkcs8: bool) -> bytes:
    """The bytes of a P-256 key."""
    secret, public = d.rng.randbytes(32), d.rng.randbytes(64)
    if not pkcs8:
        return (
            bytes.fromhex("30770201010420")
            + secret
            + bytes.fromhex("a00a06082a8648ce3d030107a14403420004")
            + public
        )
    return (
        bytes.fromhex("308187020100301306072a8648ce3d020106082a8648ce3d030107046d306b0201010420")
        + secret
        + bytes.fromhex("a14403420004")
        + public
    )


def _ed25519_der(d: _Draw) -> bytes:
    return bytes.fromhex("302e020100300506032b657004220420") + d.rng.randbytes(32)


def _pem(label: str, der: bytes) -> tuple[str, tuple[str, ...]]:
    """A PEM block and its hidden parts: the body lines and the END line."""
    body = _wrap(base64.b64encode(der).decode(), 64)
    end = f"-----END {label}-----"
    return "\n".join([f"-----BEGIN {label}-----", *body, end]), (*body, end)


def _ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _openssh(d: _Draw, comment: str, *, rsa: bool = False) -> tuple[str, tuple[str, ...]]:
    """An unencrypted OpenSSH private key block (Ed25519, or RSA) and its hidden parts."""
    rng = d.rng
    if rsa:
        e, n = b"\x01\x00\x01", b"\x00" + bytes([rng.randrange(0xC0, 0x100)]) + rng.randbytes(383)
        public = _ssh_string(b"ssh-rsa") + _ssh_string(e) + _ssh_string(n)
        private = (
            _ssh_string(b"ssh-rsa")
            + _ssh_string(n)
            + _ssh_string(e)
            + _ssh_string(rng.randbytes(384))
            + _ssh_string(b"\x00" + rng.randbytes(192))
            + _ssh_string(b"\x00" + rng.randbytes(192))
            + _ssh_string(b"\x00" + rng.randbytes(192))
        )
    else:
        key = rng.randbytes(32)
        public = _ssh_string(b"ssh-ed25519") + _ssh_string(key)
        private = (
            _ssh_string(b"ssh-ed25519") + _ssh_string(key) + _ssh_string(rng.randbytes(32) + key)
        )
    check = rng.randbytes(4)
    section = check + check + private + _ssh_string(comment.encode())
    section += bytes(range(1, 1 + (-len(section)) % 8))
    data = (
        b"openssh-key-v1\x00"
        + _ssh_string(b"none")
        + _ssh_string(b"none")
        + _ssh_string(b"")
        + struct.pack(">I", 1)
        + _ssh_string(public)
        + _ssh_string(section)
    )
    body = _wrap(base64.b64encode(data).decode(), 70)
    end = "-----END OPENSSH PRIVATE KEY-----"
    return "\n".join(["-----BEGIN OPENSSH PRIVATE KEY-----", *body, end]), (*body, end)


# ---------------------------------------------------------------------------------------------
# Secrets


class _Secrets:
    def __init__(self, draw: _Draw) -> None:
        self.d = draw
        self.items: list[Secret] = []

    def add(self, kind: str, line: str, *hidden: str, credential: bool = True) -> None:
        self.items.append(Secret(kind, line, hidden, credential))

    def each(self, kind: str, make: Callable[[], str], templates: tuple[str, ...]) -> None:
        """One line per template; {v} is a fresh value, which is what is hidden."""
        for template in templates:
            value = make()
            self.add(kind, template.format(v=value), value)


# Phrasings of a provider's token, which is recognisable by its shape alone: {v} is the value,
# {l} its English name, {z} its Chinese name, {e} an environment variable, {y} a YAML key and
# {j} a JSON key.
_EN = (
    "The {l} for the deploy job is {v} until we rotate it",
    "use {v} as the {l} on staging",
    "here's the {l}: {v} (don't share)",
    "I rotated the {l}, the new one is {v}",
    "Pinned for ops: {l} {v}",
    "can you check whether {v} still works? it's the {l} from last week",
    "Reminder: the {l} is {v} and it expires next month",
    "{l} = {v}",
)
_ZH = (
    "使用{v}登录",
    "{z}是{v}，别外传",
    "新的{z}：{v}",
    "部署脚本里用的是{v}，下周轮换",
    "把{v}填到配置文件里就行",
    "生产环境的{z}={v}",
    "{z}换成了{v}，旧的作废",
)
_ENV = ("{e}={v}", "export {e}={v}", '{e}="{v}"')
_STRUCTURED = ("{y}: {v}", '{{"{j}": "{v}"}}', '{y}: "{v}"', '"{j}":"{v}",')


@dataclass(frozen=True, slots=True)
class _Provider:
    kind: str
    make: Callable[[_Draw], str]
    english: str
    chinese: str
    env: str
    yaml: str
    json: str
    forced: tuple[str, ...] = ()


_PROVIDERS = (
    _Provider(
        "aws-access-key",
        _aws_access_key,
        "AWS access key",
        "AWS访问密钥",
        "AWS_ACCESS_KEY_ID",
        "aws_access_key_id",
        "AccessKeyId",
        ("使用{v}登录",),
    ),
    _Provider(
        "github-token",
        _github_token,
        "GitHub token",
        "GitHub令牌",
        "GITHUB_TOKEN",
        "token",
        "token",
    ),
    _Provider(
        "github-pat",
        _github_pat,
        "fine-grained GitHub PAT",
        "GitHub细粒度令牌",
        "GH_PAT",
        "github_pat",
        "githubPat",
    ),
    _Provider(
        "gitlab-token",
        _gitlab_token,
        "GitLab token",
        "GitLab令牌",
        "GITLAB_TOKEN",
        "private_token",
        "gitlabToken",
    ),
    _Provider(
        "slack-token",
        _slack_token,
        "Slack bot token",
        "Slack机器人令牌",
        "SLACK_BOT_TOKEN",
        "slack_token",
        "slackToken",
    ),
    _Provider(
        "stripe-key",
        _stripe_key,
        "Stripe key",
        "Stripe密钥",
        "STRIPE_SECRET_KEY",
        "stripe_key",
        "stripeKey",
    ),
    _Provider(
        "stripe-webhook-secret",
        _stripe_webhook_secret,
        "Stripe webhook signing secret",
        "Stripe回调签名密钥",
        "STRIPE_WEBHOOK_SECRET",
        "webhook_secret",
        "webhookSecret",
        ("whsec: {v}",),
    ),
    _Provider(
        "openai-key",
        _openai_key,
        "OpenAI key",
        "OpenAI密钥",
        "OPENAI_API_KEY",
        "openai_api_key",
        "openaiKey",
    ),
    _Provider(
        "anthropic-key",
        _anthropic_key,
        "Anthropic key",
        "Claude接口密钥",
        "ANTHROPIC_API_KEY",
        "anthropic_key",
        "anthropicKey",
    ),
    _Provider(
        "google-api-key",
        _google_api_key,
        "Google Maps key",
        "谷歌地图密钥",
        "GOOGLE_API_KEY",
        "maps_api_key",
        "apiKey",
    ),
    _Provider(
        "npm-token", _npm_token, "npm token", "npm令牌", "NPM_TOKEN", "npmAuthToken", "token"
    ),
    _Provider(
        "sendgrid-key",
        _sendgrid_key,
        "SendGrid key",
        "SendGrid邮件密钥",
        "SENDGRID_API_KEY",
        "sendgrid_key",
        "sendgridKey",
    ),
    _Provider(
        "discord-bot-token",
        _discord_token,
        "Discord bot token",
        "Discord机器人令牌",
        "DISCORD_TOKEN",
        "discord_token",
        "botToken",
    ),
    _Provider(
        "telegram-bot-token",
        _telegram_token,
        "Telegram bot token",
        "电报机器人令牌",
        "TELEGRAM_BOT_TOKEN",
        "bot_token",
        "telegramToken",
    ),
    _Provider("jwt", _jwt, "session JWT", "会话令牌", "ACCESS_TOKEN", "jwt", "access_token"),
)


def _providers(s: _Secrets) -> None:
    rng = s.d.rng
    for p in _PROVIDERS:
        english = rng.sample(_EN, 3)
        templates = (
            "{v}",
            rng.choice(_ENV),
            *rng.sample(_STRUCTURED, 2),
            *english,
            *rng.sample([t for t in _ZH if t not in p.forced], 2),
            *p.forced,
        )
        for template in templates:
            value = p.make(s.d)
            line = template.format(v=value, l=p.english, z=p.chinese, e=p.env, y=p.yaml, j=p.json)
            s.add(p.kind, line, value)


def _aws_secret_keys(s: _Secrets) -> None:
    d = s.d
    s.each(
        "aws-secret-key",
        lambda: _aws_secret_key(d),
        (
            "aws_secret_access_key = {v}",
            "AWS_SECRET_ACCESS_KEY={v}",
            "export AWS_SECRET_ACCESS_KEY={v}",
            'aws_secret_access_key: "{v}"',
            '"SecretAccessKey": "{v}",',
            "the AWS secret access key is {v}, keep it out of the repo",
            "AWS密钥：{v}",
        ),
    )
    key, secret = _aws_access_key(d), _aws_secret_key(d)
    s.add("aws-secret-key", f"access key {key} / secret key {secret}", key, secret)


def _slack_webhooks(s: _Secrets) -> None:
    templates = (
        "{u}",
        "SLACK_WEBHOOK_URL={u}",
        "webhook_url: {u}",
        '{{"webhook": "{u}"}}',
        "Alerts post to {u} (the #incidents channel)",
        "curl -X POST -H 'Content-type: application/json' --data '{{\"text\":\"hi\"}}' {u}",
        "告警机器人的地址是{u}，别发到外部群",
        "Slack回调：{u}",
    )
    for template in templates:
        url, last = _slack_webhook_path(s.d)
        s.add("slack-webhook", template.format(u=url), last)


def _twilio(s: _Secrets) -> None:
    d = s.d
    auth = (
        "Twilio: account SID {a}, auth token {t}",
        "TWILIO_AUTH_TOKEN={t}",
        "twilio auth token {t} for account {a}",
        '{{"account_sid": "{a}", "auth_token": "{t}"}}',
        "Twilio账号{a}的auth token是{t}",
        'client = Client("{a}", "{t}")',
        "curl -u {a}:{t} https://api.twilio.com/2010-04-01/Accounts.json",
        "auth_token: {t}",
    )
    for template in auth:
        token = d.hex(32)
        s.add("twilio-auth-token", template.format(a="AC" + d.hex(32), t=token), token)
    keys = (
        "{k}",
        "TWILIO_API_KEY={k}",
        "Twilio API key {k} with secret {x}",
        "twilio_api_key: {k}",
        "短信服务的API key是{k}，secret是{x}",
        "the SMS sender uses API key {k}",
        '{{"api_key_sid": "{k}", "api_key_secret": "{x}"}}',
    )
    for template in keys:
        key, secret = "SK" + d.hex(32), d.chars(ALNUM, 32)
        line = template.format(k=key, x=secret)
        s.add("twilio-api-key", line, *(v for v in (key, secret) if v in line))


def _azure(s: _Secrets) -> None:
    d = s.d
    accounts = ("stprodlogs01", "stmediaeu", "acmebackups", "pinbotassets", "stdatalake02")

    def connection() -> tuple[str, str]:
        key = d.b64(64)
        account = d.rng.choice(accounts)
        return (
            f"DefaultEndpointsProtocol=https;AccountName={account};AccountKey={key};"
            "EndpointSuffix=core.windows.net",
            key,
        )

    templates = (
        "{c}",
        'AZURE_STORAGE_CONNECTION_STRING="{c}"',
        '{{"ConnectionStrings": {{"Storage": "{c}"}}}}',
        "storage_connection: {c}",
        "The blob container uses {c}",
        "存储账号的连接字符串是{c}，只给备份任务用",
        'BlobServiceClient.from_connection_string("{c}")',
    )
    for template in templates:
        conn, key = connection()
        s.add("azure-storage-key", template.format(c=conn), key)
    key = d.b64(64)
    s.add("azure-storage-key", f"AccountKey={key}", key)

    def sas() -> tuple[str, str]:
        sig = quote(d.b64(32), safe="")
        start = d.rng.randrange(1, 20)
        query = (
            f"sv=2022-11-02&ss=b&srt=co&sp=rl&se=2026-0{d.rng.randrange(1, 9)}-{start + 7:02d}"
            f"T18:00:00Z&st=2026-01-{start:02d}T10:00:00Z&spr=https&sig={sig}"
        )
        return query, sig

    sas_templates = (
        "https://{a}.blob.core.windows.net/uploads/report.pdf?{q}",
        "SAS token: ?{q}",
        'AZURE_SAS_TOKEN="{q}"',
        "the SAS URL https://{a}.blob.core.windows.net/exports?{q} expires Friday",
        "上传用这个SAS链接https://{a}.blob.core.windows.net/inbox?{q}",
        "{q}",
        '{{"sasUrl": "https://{a}.blob.core.windows.net/media?{q}"}}',
        "sas_token: '{q}'",
    )
    for template in sas_templates:
        query, sig = sas()
        s.add("azure-sas", template.format(a=d.rng.choice(accounts), q=query), sig)


def _private_keys(s: _Secrets) -> None:
    d = s.d
    blocks = (
        ("", _pem("RSA PRIVATE KEY", _rsa_der(d, pkcs8=False))),
        ("deploy key for the build box:\n", _pem("RSA PRIVATE KEY", _rsa_der(d, pkcs8=False))),
        ("", _pem("EC PRIVATE KEY", _ec_der(d, pkcs8=False))),
        ("服务器证书的私钥：\n", _pem("EC PRIVATE KEY", _ec_der(d, pkcs8=False))),
        ("", _pem("PRIVATE KEY", _rsa_der(d, pkcs8=True))),
        ("signing key (PKCS#8)\n", _pem("PRIVATE KEY", _ec_der(d, pkcs8=True))),
        ("", _pem("PRIVATE KEY", _ed25519_der(d))),
        ("key.pem:\n", _pem("PRIVATE KEY", _ed25519_der(d))),
    )
    for prefix, (block, hidden) in blocks:
        s.add("pem-private-key", prefix + block, *hidden)
    _, hidden = _pem("RSA PRIVATE KEY", _rsa_der(d, pkcs8=False))
    tail = hidden[-2:]
    s.add("pem-private-key", "\n".join(tail), *tail)

    comments = ("deploy@ci-runner", "mia@laptop", "backup@nas", "root@gateway", "ops@bastion")
    ssh = (
        ("", _openssh(d, comments[0])),
        ("", _openssh(d, comments[1])),
        ("here's the CI key, paste it into the secret store:\n", _openssh(d, comments[2])),
        ("跳板机私钥：\n", _openssh(d, comments[3])),
        ("~/.ssh/id_rsa\n", _openssh(d, comments[4], rsa=True)),
        ("", _openssh(d, "")),
    )
    for prefix, (block, hidden) in ssh:
        s.add("openssh-private-key", prefix + block, *hidden)
    _, hidden = _openssh(d, "ci@runner-7")
    tail = hidden[-2:]
    s.add("openssh-private-key", "\n".join(tail), *tail)


def _connection_urls(s: _Secrets) -> None:
    d = s.d
    templates = (
        "postgres://app_user:{v}@db.internal.example.com:5432/orders",
        "DATABASE_URL=postgresql://report:{v}@pg-prod-01.example.net:5432/analytics?sslmode=require",
        "mysql://root:{v}@mysql.prod.example.net:3306/shop",
        "redis://:{v}@cache.example.com:6379/0",
        "REDIS_URL=rediss://:{v}@redis-prod.example.io:6380",
        "amqp://orders:{v}@rabbit.internal.example.org:5672/%2F",
        "mongodb+srv://svc_reader:{v}@cluster0.ab1cd.mongodb.net/app?retryWrites=true",
        "连接串是mysql://etl:{v}@rm-bp1.mysql.rds.example.com:3306/dw，别提交到仓库",
        "the worker reads from redis://:{v}@queue-cache:6379/2",
        'url: "postgres://grafana:{v}@metrics-db:5432/grafana"',
    )
    s.each("connection-url", d.url_password, templates)


def _authorization(s: _Secrets) -> None:
    d = s.d
    bearer = (
        "Authorization: Bearer {v}",
        'curl -H "Authorization: Bearer {v}" https://api.example.com/v1/me',
        '{{"headers": {{"Authorization": "Bearer {v}"}}}}',
        "请求头加上Authorization: Bearer {v}就能调通",
        "authorization: bearer {v}",
        "Send Authorization: Bearer {v} with every request",
        "-H 'Authorization: Bearer {v}'",
    )
    makers: tuple[Callable[[], str], ...] = (
        lambda: _opaque_token(d),
        lambda: _jwt(d),
        lambda: "ya29." + d.chars(URLSAFE, 120),
    )
    for i, template in enumerate(bearer):
        value = makers[i % len(makers)]()
        s.add("auth-bearer", template.format(v=value), value)
    s.add("auth-bearer", f"Authorization: Bearer {(value := _jwt(d, rs256=True))}", value)

    users = ("admin", "deploy", "ci-bot", "grafana", "svc_backup", "ops", "mia", "jenkins")
    basic = (
        "Authorization: Basic {v}",
        'curl -H "Authorization: Basic {v}" https://registry.example.com/v2/_catalog',
        '"Authorization": "Basic {v}"',
        "header是Authorization: Basic {v}",
        "the proxy wants Authorization: Basic {v}",
        "Proxy-Authorization: Basic {v}",
        "authorization: basic {v}",
    )
    for i, template in enumerate(basic):
        value = base64.b64encode(f"{users[i]}:{d.password()}".encode()).decode()
        s.add("auth-basic", template.format(v=value), value)

    curl = (
        "curl -u {u}:{p} https://api.example.com/v1/status",
        "curl --user {u}:{p} https://nexus.example.org/service/rest/v1/repositories",
        "curl -u '{u}:{p}' -X POST https://jenkins.example.org/job/build/build",
        "用curl -u {u}:{p}调一下接口看看",
        "try curl -s -u {u}:{p} https://es.example.net/_cluster/health",
        'curl -u "{u}:{p}" https://registry.example.com/v2/',
        "curl -k -u {u}:{p} https://grafana.example.com/api/health",
    )
    for i, template in enumerate(curl):
        password = d.url_password() if i % 2 else d.password()
        s.add("curl-user", template.format(u=users[i], p=password), password)


def _keyword_secrets(s: _Secrets) -> None:
    d = s.d
    s.each(
        "password-assignment",
        d.password,
        (
            "password={v}",
            "passwd: {v}",
            "pwd={v}",
            "Password: {v}",
            "password：{v}",
            "password - {v}",
            "PASSWORD = {v}",
            "password: '{v}'",
            "login admin / password {v}",
        ),
    )
    s.each(
        "password-json",
        d.password,
        (
            '"password": "{v}"',
            '{{"username": "svc_backup", "password": "{v}"}}',
            '{{"db": {{"user": "app", "passwd": "{v}"}}}}',
            '"pwd":"{v}"',
            '{{"login":"ops","password":"{v}","mfa":false}}',
            "{{'password': '{v}', 'user': 'reporter'}}",
            '"Password" : "{v}",',
        ),
    )
    s.each(
        "password-prose-en",
        d.password,
        (
            "my password is {v}",
            "the password was {v} but I changed it",
            "Password for the staging box is {v}",
            "use {v} as the password for the shared account",
            "FYI the root password is {v} now",
            "the admin pwd is {v}",
            "new password: {v} (the old one no longer works)",
            "Her streaming password was {v}",
            "The VPN passphrase is {v}",
        ),
    )
    s.each(
        "password-prose-zh",
        d.password,
        (
            "密码: {v}",
            "我的密码是{v}",
            "数据库口令：{v}",
            "登录密码是{v}，别外传",
            "服务器root密码{v}，用完记得改",
            "口令为{v}",
            "新密码：{v}",
            "邮箱密码改成了{v}",
            "WiFi密码是{v}",
        ),
    )
    s.add("pin-passcode", "the PIN is 4821", "4821")

    def wifi() -> str:
        first, second = d.rng.sample(_WORDS, 2)
        return f"{first.lower()}-{second.lower()}-{d.rng.randint(10, 99)}"

    s.each(
        "pin-passcode",
        d.pin,
        (
            "My bank card PIN: {v}",
            "door passcode: {v}",
            "PIN={v}",
            "银行卡PIN码是{v}",
            "SIM card PIN {v}, PUK is in the drawer",
            "phone passcode was {v}",
        ),
    )
    s.each("pin-passcode", wifi, ("wifi passcode {v}", "WiFi passcode is {v}"))

    s.each(
        "client-secret",
        lambda: d.chars(URLSAFE, d.rng.choice((32, 40))),
        (
            "secret: {v}",
            "SECRET={v}",
            "client secret = {v}",
            "client_secret: {v}",
            '"client_secret": "{v}"',
            "The OAuth client secret is {v}",
            "secret - {v}",
            "shared secret：{v}",
        ),
    )
    s.each(
        "token-assignment",
        lambda: d.chars(ALNUM, d.rng.choice((32, 40, 48))),
        (
            "token: {v}",
            "TOKEN={v}",
            "access token is {v}",
            "refresh_token = {v}",
            '"token": "{v}"',
            "bot token: {v}",
            "the API token was {v}, revoked since",
            "auth_token={v}",
        ),
    )
    s.each(
        "api-key-assignment",
        lambda: d.chars(ALNUM, d.rng.choice((32, 40))),
        (
            "api key: {v}",
            "API_KEY={v}",
            "apikey = {v}",
            "api-key {v}",
            '"apiKey": "{v}"',
            "The API key is {v}",
            "x-api-key: {v}",
            "weather service api key {v}",
        ),
    )
    s.add("api-key-hex", f"api key 5f3c{(value := d.hex(20))}", "5f3c" + value)
    s.each(
        "api-key-hex",
        lambda: d.hex(24),
        (
            "API key: {v}",
            "the api key is {v}",
            "apikey={v}",
            "API密钥{v}",
            "api_key: {v}",
            '"api_key": "{v}"',
            "Use api key {v} for the sandbox",
        ),
    )
    s.each(
        "access-key-assignment",
        lambda: d.chars(UPPER_DIGITS + LOWER, 32),
        (
            "access key: {v}",
            "access_key = {v}",
            "ACCESS_KEY={v}",
            "The access key is {v}",
        ),
    )
    s.each(
        "access-key-assignment",
        lambda: d.hex(64),
        (
            "private key: {v}",
            "private_key = 0x{v}",
            "PRIVATE_KEY={v}",
            "my wallet private key is {v}",
        ),
    )
    s.each(
        "secret-prose-zh",
        lambda: d.chars(ALNUM, d.rng.choice((24, 32))),
        (
            "密钥：{v}",
            "令牌: {v}",
            "API密钥是{v}",
            "访问令牌={v}",
            "签名密钥{v}，别提交",
            "新令牌{v}已经生效",
            "机器人令牌：{v}",
            "加密密钥为{v}",
            "把密钥{v}配置到环境变量里",
        ),
    )
    env = (
        ("DB_PASSWORD={v}", d.password),
        ("STRIPE_API_KEY={v}", lambda: _stripe_key(d)),
        ("JWT_SECRET={v}", lambda: d.chars(URLSAFE, 48)),
        ("REDIS_PASSWORD={v}", d.url_password),
        ("MYSQL_ROOT_PASSWORD={v}", d.password),
        ('SMTP_PASSWORD="{v}"', d.password),
        ("export GITHUB_CLIENT_SECRET={v}", lambda: d.hex(40)),
        ("SESSION_SECRET_KEY={v}", lambda: d.chars(URLSAFE, 50)),
        ("  POSTGRES_PASSWORD: {v}", d.url_password),
        ("DJANGO_SECRET_KEY='{v}'", lambda: d.chars(ALNUM + "!#%^&*", 50)),
    )
    for template, make in env:
        value = make()
        s.add("env-secret-var", template.format(v=value), value)


def _zero_width(s: _Secrets) -> None:
    d = s.d
    zwsp, zwj = "\u200b", "\u200d"

    def split(value: str, mark: str) -> str:
        middle = len(value) // 2
        return value[:middle] + mark + value[middle:]

    lines = (
        ("{v}", split(_aws_access_key(d), zwsp)),
        ("使用{v}登录", split(_aws_access_key(d), zwsp)),
        ("GITHUB_TOKEN={v}", split(_github_token(d), zwj)),
        ("token: {v}", split(d.chars(ALNUM, 40), zwsp)),
        ("password={v}", split(d.password(), zwsp)),
        ("the Slack token is {v}", split(_slack_token(d), zwsp)),
        ("npm令牌：{v}", split(_npm_token(d), zwj)),
        ("OPENAI_API_KEY={v}", split(_openai_key(d), zwsp)),
    )
    for template, value in lines:
        s.add("zero-width-token", template.format(v=value), value)


def _addresses(s: _Secrets) -> None:
    d = s.d
    rng = d.rng

    def ipv4() -> str:
        first = rng.choice(("10", "192.168", "172.16", "172.20", "45.77", "51", "185"))
        parts = first.split(".")
        while len(parts) < 4:
            parts.append(str(rng.randint(1, 254)))
        return ".".join(parts)

    ipv4_templates = (
        "{v}",
        "the staging box is at {v}",
        "ping {v} if the VPN drops",
        "服务器地址是{v}，只能内网访问",
        "SERVER_IP={v}",
        "host: {v}",
        '{{"ip": "{v}", "role": "primary"}}',
        "nginx upstream points at {v}:8080 now",
        "打印机在{v}上",
    )
    for template in ipv4_templates:
        value = ipv4()
        s.add("ipv4", template.format(v=value), value, credential=False)

    def ipv6() -> str:
        groups = [rng.choice(("2a00:1450", "2a01:4f8", "2606:4700", "2400:cb00"))]
        groups += [f"{rng.randrange(0x10000):x}" for _ in range(rng.choice((2, 3)))]
        tail = [f"{rng.randrange(0x10000):x}" for _ in range(rng.choice((1, 2)))]
        return ":".join(groups) + "::" + ":".join(tail)

    full = ":".join(f"{rng.randrange(0x10000):04x}" for _ in range(7))
    fixed = (
        ("::1", "::1"),
        ("the service only binds to fe80::1 on eth0", "fe80::1"),
        (f"2a02:{full}", f"2a02:{full}"),
    )
    for line, value in fixed:
        s.add("ipv6", line, value, credential=False)
    for template in (
        "{v}",
        "the new load balancer is {v}",
        "AAAA记录指向{v}",
        "listen [{v}]:443 ssl;",
        "ipv6_address: {v}",
    ):
        value = ipv6()
        s.add("ipv6", template.format(v=value), value, credential=False)

    host_ports = (
        ("dbhost:5432", "dbhost:5432"),
        ("db.internal.example.com:5432", "db.internal.example.com:5432"),
        ("localhost:6379", "localhost:6379"),
        ("connect to cache-01:6379 from the worker", "cache-01:6379"),
        ("REDIS_ADDR=redis.prod.example.net:6379", "redis.prod.example.net:6379"),
        ("服务跑在api.internal.example.org:8080上", "api.internal.example.org:8080"),
        ("kafka: broker-2.example.io:9092", "broker-2.example.io:9092"),
        ("消息队列地址mq.example.cn:5672", "mq.example.cn:5672"),
        ("the metrics endpoint is grafana.internal:3000", "grafana.internal:3000"),
    )
    for line, value in host_ports:
        s.add("host-port", line, value, credential=False)

    ssh = (
        ("ssh deploy@10.1.2.3", "deploy@10.1.2.3"),
        ("ssh admin@bastion.example.net", "admin@bastion.example.net"),
        ("scp build.tar.gz ops@build-03.example.org:/tmp/", "ops@build-03.example.org"),
        ("登录用ssh root@172.16.8.20", "root@172.16.8.20"),
        ("ssh -p 2222 ubuntu@jump.example.com", "ubuntu@jump.example.com"),
        ("rsync -av dist/ www@web-02.example.net:/srv/site/", "www@web-02.example.net"),
        ("跳板机是ec2-user@bastion.prod.example.io", "ec2-user@bastion.prod.example.io"),
        ("ssh pi@192.168.1.44 then run the backup", "pi@192.168.1.44"),
    )
    for line, value in ssh:
        s.add("ssh-target", line, value, credential=False)

    emails = (
        ("j.harlow@northwind-logistics.com", "j.harlow@northwind-logistics.com"),
        ("有问题发邮件到li.ming@corp.example.cn", "li.ming@corp.example.cn"),
        ("contact: ops-team@acme-robotics.io", "ops-team@acme-robotics.io"),
        ('{"email": "mia.chen@gmail.com"}', "mia.chen@gmail.com"),
        ("Send the invoice to billing@harbourfoods.co.uk", "billing@harbourfoods.co.uk"),
        ("我的邮箱是wang.lei88@163.com", "wang.lei88@163.com"),
        ("cc priya.nair+pinbot@outlook.com on the thread", "priya.nair+pinbot@outlook.com"),
        ("EMAIL_FROM=noreply@pinbot.example.org", "noreply@pinbot.example.org"),
    )
    for line, value in emails:
        s.add("email", line, value, credential=False)


def _build_secrets(draw: _Draw) -> tuple[Secret, ...]:
    s = _Secrets(draw)
    _providers(s)
    _aws_secret_keys(s)
    _slack_webhooks(s)
    _twilio(s)
    _azure(s)
    _private_keys(s)
    _connection_urls(s)
    _authorization(s)
    _keyword_secrets(s)
    _zero_width(s)
    _addresses(s)
    return tuple(s.items)


# ---------------------------------------------------------------------------------------------
# Ordinary lines

_ORDINARY: dict[str, tuple[str, ...]] = {
    "version": (
        "Version 2.0.0.1",
        "v1.2.3",
        "Python 3.11.4",
        "We pinned Django to 4.2.11 until the migration is done",
        "Node.js 20.11.1 is the minimum for the frontend",
        "Bump to v0.9.14 after the demo",
        "Chrome 124.0.6367.91 breaks the upload button",
        "Windows build 10.0.19045.3803 is fine for the kiosks",
        "Release 2024.3 ships on Monday",
        "PostgreSQL 16.2 on the new cluster",
        "Requires Go 1.22 or later",
        "iOS 17.4.1 users still see the old icon",
        "Server header says nginx/1.25.4",
        "Ubuntu 22.04 LTS only, no 23.10",
        "semver: MAJOR.MINOR.PATCH, e.g. 3.0.0",
        "Version 1.0.0.12 is the last build for Windows 7",
        "v2.1.0-rc.3 is on the beta channel",
        "Java 21.0.2 with the G1 defaults",
        "Firmware 4.2.0.17 fixed the fan noise",
        "Kotlin 1.9.23, Gradle 8.7",
        "版本号统一用v2.3.0这种格式",
        "升级到Python 3.12之前先跑全量测试",
        "客户端最低支持版本1.8.2",
        "本周五发布4.1.0版本",
        "安卓端5.2.7已经上架应用商店",
        "后端从3.4.0回滚到了3.3.9",
        "Node版本锁定在18.19.0",
        "数据库升级到PostgreSQL 15.6以后慢查询少了一半",
        "小程序基础库2.33.0以上才支持这个接口",
        "固件版本V3.0.0.2修复了重启问题",
    ),
    "date": (
        "2026-03-14",
        "Due 14 March 2026",
        "The sprint ends on 2026-04-03",
        "Code freeze: Friday 12 June",
        "Invoices go out on the 1st of every month",
        "Holiday from 23/12 to 02/01, no deploys",
        "Quarter closes on 31.03.2026",
        "Next review: Tue 9 Sep 2025",
        "The lease renews on 1 October",
        "Deadline moved to 2026/05/20",
        "Passport expires 2029-11-30, renew in 2029",
        "Team offsite is 18-20 September",
        "截止日期是2026年3月14日",
        "下周三（5月20日）交周报",
        "国庆假期10月1日到10月7日",
        "合同2026年12月31日到期",
        "春节前一周不上线",
        "季度总结会定在6月28日",
        "发版日期改到7月3日",
        "每月15号发工资",
        "体检安排在2026-04-22上午",
        "年假要在12月31日前休完",
    ),
    "time": (
        "07:45",
        "12:30:45",
        "Standup at 09:15 sharp",
        "Lunch is 12:00 to 13:00",
        "Backups run at 02:30 UTC",
        "The cron job fires at 23:59:59",
        "Quiet hours are 22:00-07:00",
        "Her 10k time was 47:12",
        "Deploy window: 14:00 to 16:00 on Thursdays",
        "Doors open at 18:30",
        "The video is 1:02:37 long",
        "Alarm at 05:50 on race day",
        "每天早上9:30站会",
        "下午3:30开评审会",
        "晚上22:00以后不要发消息",
        "备份在凌晨2:00执行",
        "周五17:30团建出发",
        "午休12:00到13:30",
        "直播从20:00开始，预计到21:30",
        "班车7:10从地铁站发车",
    ),
    "price": (
        "$12.50",
        "Lunch budget is $15 per person",
        "The plan costs €49 a month",
        "Flights were £84.20 each way",
        "Budget cap: $2,000 per quarter",
        "GPU time is $2.48 per hour",
        "Coffee went up to $4.75",
        "Tickets are 35 CHF at the door",
        "The invoice total was €1,249.99 including VAT",
        "Hosting is about $310/month after the upgrade",
        "午饭预算每人45元",
        "年费会员¥299",
        "服务器每月费用大约3200元",
        "打车报销上限80元",
        "团建人均200元以内",
        "咖啡涨到了28块",
        "这台显示器1899元",
        "机票往返一共¥2,460",
    ),
    "ratio": (
        "3:1",
        "16:9",
        "Aspect ratio 4:3 for slides",
        "Mix cement and sand 1:3",
        "The final score was 2:1",
        "Use 21:9 for the banner",
        "Rice to water 1:1.5",
        "The odds were 5:2",
        "Bread dough: flour to water 5:3",
        "Reviewers to authors should stay near 1:4",
        "配比1:2",
        "比分3:2",
        "海报用9:16竖版",
        "男女比例大概1:1",
        "糖和醋按1:1调",
        "读写流量比大约是8:1",
    ),
    "percentage": (
        "98.5%",
        "Test coverage must stay above 85%",
        "CPU above 90% pages on-call",
        "20% off for early birds",
        "Conversion went from 2.1% to 2.7%",
        "VAT is 19%",
        "Only 3% of users open the settings page",
        "Battery drops to 40% by noon",
        "覆盖率不能低于80%",
        "同比增长12.5%",
        "折扣是八五折，也就是85%",
        "转化率提升了3个百分点",
        "磁盘使用率超过90%要报警",
        "退货率控制在2%以内",
    ),
    "path": (
        "/etc/nginx/nginx.conf",
        "C:\\Users\\alice\\Documents\\report.docx",
        "Logs are in /var/log/pinbot/",
        "Config lives at ~/.config/pinbot/config.yaml",
        "Put fixtures under tests/core/data/",
        "D:\\Projects\\site\\build",
        "The script is scripts/deploy.sh",
        "/usr/local/bin/python3.11",
        "See docs/adr/0007-storage.md",
        "%APPDATA%\\Code\\User\\settings.json",
        "./node_modules/.bin/eslint",
        "/opt/app/shared/uploads",
        "src/components/Button.tsx",
        "The cert chain goes in /etc/ssl/certs/",
        "~/.ssh/config holds the host aliases",
        "配置文件在/etc/pinbot/config.yaml",
        "日志目录是/var/log/app/",
        "模板放在templates/email/下面",
        "把导出的文件存到D:\\报表\\2026\\",
        "脚本路径：scripts/backup.sh",
        "前端代码在web/src/pages里",
    ),
    "url": (
        "https://docs.example.com/a/b?x=1",
        "https://docs.python.org/3/library/re.html",
        "Design doc: https://wiki.example.org/display/ENG/Pinning",
        "https://github.com/org/repo/issues/44",
        "Status page: https://status.example.com",
        "https://www.rfc-editor.org/rfc/rfc9110",
        "https://en.wikipedia.org/wiki/Unix_time",
        "Dashboard: https://grafana.example.net/d/latency/overview?orgId=1&refresh=30s",
        "https://pypi.org/project/ruff/",
        "https://example.com/search?q=token+limits",
        "https://shop.example.com/cart?item=42&qty=2",
        "Slides are at https://slides.example.com/deck/q3-roadmap",
        "文档在https://wiki.example.cn/team/onboarding",
        "接口说明见https://api-docs.example.com/v2/orders",
        "报名链接：https://forms.example.com/s/summer-party",
        "参考https://developer.mozilla.org/zh-CN/docs/Web/HTTP",
    ),
    "clone-url": (
        "git@github.com:org/repo.git",
        "git clone https://github.com/org/repo.git",
        "git@gitlab.com:platform/infra/terraform.git",
        "https://gitlab.com/platform/infra/terraform.git",
        "git clone git@github.com:pinbot/pinbot.git",
        "Mirror: https://git.example.org/tools/linters.git",
        "ssh://git@github.com/org/repo.git",
        "git remote add upstream git@github.com:python/cpython.git",
        "git@bitbucket.org:team/mobile-app.git",
        "git submodule add https://github.com/org/shared-protos.git protos",
        "代码仓库：git@github.com:acme/payments.git",
        "克隆地址https://gitee.com/acme/website.git",
    ),
    "setting": (
        "MAX_SIZE=100",
        "DEBUG=true",
        "TIMEOUT=30",
        "LOG_LEVEL=info",
        "WORKERS=4",
        "RETRIES=3",
        "CACHE_TTL=3600",
        "PAGE_SIZE=50",
        "ENABLE_BETA=false",
        "max_connections: 200",
        "timezone: Europe/Berlin",
        "PASSWORD_MIN_LENGTH=12",
        "TOKEN_TTL_SECONDS=900",
        "SECRET_ROTATION_DAYS=90",
        "max_tokens: 1024",
        "temperature=0.2",
        '"timeout": 30',
        '{"retries": 3, "backoff": "exponential"}',
        "indent_size = 4",
        "NODE_ENV=production",
        "LANG=zh_CN.UTF-8",
        "pool_size: 10",
        "KEY_PREFIX=pinbot",
        "password_reset_enabled: true",
        "token_limit = 4096",
        "超时时间设为30秒：TIMEOUT=30",
        "并发数WORKERS=8就够了",
        "日志级别改成LOG_LEVEL=warning",
        "测试环境DEBUG=true，生产必须false",
        "重试次数max_retries: 5",
    ),
    "prose-token-word": (
        "token: use the one from the vault",
        "pwd = print working directory",
        "Secret= santa gifts due Friday.",
        "the password is required for login",
        "reset your password via the portal",
        "token limits are 4k per request",
        "API keys live in the vault, never in chat",
        "Never paste a password into a pinned message",
        "Password rules: at least 12 characters and one digit",
        "PIN: ask the front desk",
        "The secret to good risotto is patience",
        "Secret Santa budget is $25",
        "tokens are counted per model, not per chat",
        "The key is to reply within a day",
        "key: value pairs go in the YAML file",
        "Use the access key from your own profile, not the shared one",
        "the password was too short, so the form rejected it",
        "Password is case-sensitive",
        "My password is stored in the password manager, not here",
        "client secret: see the team vault entry for payments",
        "Token: see the CI settings page",
        "Password - see the onboarding doc",
        "The token was revoked yesterday",
        "The PIN is on the back of the card",
        "wifi passcode is on the fridge",
        "API key rotation happens every 90 days",
        "Where is the API key? In the vault under payments/prod.",
        "pwd shows where you are; cd changes it",
        "passwd is the Unix command to change a password",
        "Forgot password? Click the link on the login page",
        "Token budget: 8000 per reply",
        "A JWT has three parts separated by dots",
        "Bearer tokens go in the Authorization header",
        "Keys: F5 refreshes, Ctrl+S saves",
        "the secret ingredient is smoked paprika",
        "password protected PDFs cannot be previewed",
        "The session token expires after 30 minutes of inactivity",
        "Do not log tokens, passwords or keys",
        "Rotate the deploy key when someone leaves the team",
        "Private keys never leave the HSM",
        "The PIN pad at the entrance is broken again",
        "token = the smallest unit the model reads",
        "Secret: the surprise party is on Saturday, don't tell Bob",
        "The private key is the one you keep; the public key you share",
        "Ask for a new access token when the old one expires",
    ),
    "prose-token-word-zh": (
        "密码请向管理员索取",
        "令牌数量上限是每天一千",
        "密码至少12位，包含数字和字母",
        "忘记密码请点登录页的找回链接",
        "密钥统一放在保险库里，不要发到群里",
        "令牌过期后需要重新登录",
        "口令由值班同学每周更换",
        "密码：请问运维组",
        "令牌：用保险库里的那个",
        "不要在聊天里贴密码",
        "API密钥每90天轮换一次",
        "密钥管理规范见内网文档",
        "这个接口需要令牌认证",
        "密码输错三次会锁定账号",
        "新员工的初始密码由HR单独通知",
        "私钥永远不要离开服务器",
        "访问令牌有效期是两小时",
        "请求头里要带上令牌",
        "秘密：周五给老板过生日，别说漏嘴",
        "WiFi密码贴在前台",
        "门禁密码找行政要",
        "令牌桶限流，每秒十个请求",
        "密码学课程下周开始",
        "重置密码需要手机验证码",
        "密钥泄露要第一时间轮换",
    ),
    "commit-hash": (),
    "ticket": (
        "JIRA-1234",
        "See PROJ-88 for context",
        "Blocked on OPS-412",
        "Fixes #44",
        "Duplicate of BUG-2290, closing",
        "合并前关联需求单FEAT-2031",
        "这个问题记在SUP-7781里了",
    ),
    "id": (
        "Order #48213 shipped today",
        "Build 1742 is green",
        "Room 3B on the third floor",
        "Invoice INV-2026-0042 is paid",
        "Flight LH 2417 lands at 16:05",
        "会议室A-502已经订好",
        "快递单号后四位是3317",
        "工单编号WO-20260314-07",
    ),
    "mention": (
        "@alice",
        "Ask alice@home about the party",
        "cc @bob and @carol",
        "@team-infra please review",
        "ping @li.wei when ready",
        "@oncall-sre heads up, the queue is growing",
        "alice@home is the name of her laptop, not an address",
        "bob@work answers faster than bob@home",
        "@所有人 周五下午有下午茶",
        "找@王磊确认一下需求",
        "这个问题@张敏负责跟进",
    ),
    "zh-note": (
        "周会纪要：下周一前完成接口联调",
        "会议结论：先做移动端，再做网页端",
        "请用中文回答，代码注释用英文",
        "回答尽量简短，先给结论再解释",
        "所有对外文档都要经过法务审核",
        "新人第一周的任务是熟悉代码库",
        "测试环境每天晚上自动重置数据",
        "周五下午不发版",
        "需求评审改到周二上午",
        "客户更喜欢正式一点的语气",
        "下个迭代重点是性能优化",
        "季度目标：把首页加载时间降到一秒以内",
        "线上问题先止血再定位原因",
        "每个合并请求至少一个人审核",
        "设计稿以最新版本为准",
        "项目代号叫青鸟，春天上线",
        "办公室周末不开空调",
        "年会在三楼大厅举办",
        "请假需要提前三天在系统里申请",
        "报销单每月25号之前提交",
        "产品例会改成双周一次",
        "上线前要在群里通知客服",
        "用户反馈统一记到表格里",
        "接口变更需要提前一周通知下游",
        "数据看板每周一早上更新",
        "所有时间都用北京时间",
        "温度单位用摄氏度，长度用公制",
        "回答里不要出现英文缩写，除非有解释",
        "周报模板放在共享盘里",
        "新功能先灰度百分之五的用户",
        "如果构建失败，先看最近一次提交",
        "文档要写清楚怎么回滚",
        "下午茶轮流点，本周轮到市场部",
        "客户演示准备三个场景",
        "复盘会不追责，只讨论改进",
        "办公室的绿植周三浇水",
        "停车位需要提前一天预约",
        "出差住宿标准每晚不超过500元",
        "代码冻结期间只修严重问题",
        "发布说明要中英文各一份",
        "本周值班的是后端组",
        "图片统一压缩到200KB以内",
        "提醒我每周五整理待办事项",
        "我对花生过敏，推荐菜谱时避开",
        "孩子周三下午放学早，那天不排会",
        "请称呼我为陈老师",
        "翻译时保留原文的专有名词",
        "表格里的金额保留两位小数",
        "回复客户邮件要抄送项目经理",
        "新办公室在九楼，电梯右转",
    ),
    "recipe": (
        "Pancakes: 200 g flour, 2 eggs, 300 ml milk, a pinch of salt",
        "Rest the steak for 5 minutes before slicing",
        "Bake at 180 °C for 25 minutes",
        "Add the garlic last so it does not burn",
        "Soak the beans overnight",
        "Toast the spices before grinding them",
        "Risotto: add the stock one ladle at a time",
        "Salt the pasta water generously",
        "番茄炒蛋：先炒蛋，盛出后再炒番茄",
        "红烧肉小火炖一个小时",
        "饺子馅里加一点花椒水更香",
        "米和水按1:1.2煮",
        "蒸鱼八分钟，关火再焖两分钟",
        "凉拌黄瓜要先拍再切",
    ),
    "style-rule": (
        "Use four spaces, never tabs",
        "Keep lines under 100 characters",
        "Name tests after the behaviour they check",
        "No abbreviations in public names",
        "Prefer composition over inheritance",
        "Every public function has a docstring",
        "Commit messages start with the area, then a colon",
        "One assertion per idea, not per line",
        "Type hints everywhere; mypy runs in strict mode",
        "Use f-strings, not percent formatting",
        "Imports sorted by ruff, standard library first",
        "Return early instead of nesting if statements",
        "Write dates as YYYY-MM-DD in code and docs",
        "Use British spelling in user-facing text",
        "Constants are UPPER_CASE, classes are CapWords",
        "No print statements in library code; use logging",
        "Keep functions short enough to read without scrolling",
        "Tests must not depend on the network",
        "Prefer pathlib over os.path",
        "Answer with code first, explanation after",
        "变量名用英文，不要用拼音",
        "每个函数都要写类型注解",
        "提交信息用中文写清楚改了什么",
        "缩进统一四个空格",
        "不要在循环里查询数据库",
        "公共接口必须有文档字符串",
        "单元测试不能依赖网络",
        "日志里不要打印用户手机号",
        "错误信息要告诉用户下一步怎么做",
        "代码评审意见要具体，给出例子",
        "SQL关键字用大写",
        "前端组件文件名用大驼峰",
    ),
    "hashtag": (
        "#release-notes",
        "#TIL python dataclasses can use slots",
        "#standup done, see thread",
        "#help-wanted on the parser rewrite",
        "#周报 第12周",
        "#复盘 上线事故记录",
        "#读书笔记 《人月神话》第三章",
        "#onboarding checklist updated",
    ),
    "emoji": (
        "🎉 launch day!",
        "🚀 deploy done",
        "👀 looking into the flaky test",
        "✅ migration finished, ❌ rollback not needed",
        "🔥 hotfix going out now",
        "☕ coffee machine is fixed",
        "今天的咖啡☕很好喝",
        "🎂 周四给小林过生日",
        "👍 方案通过",
        "🌧 明天下雨，户外活动取消",
    ),
    "markdown": (
        "**Bold** for warnings only",
        "- [ ] write tests",
        "- [x] update the changelog",
        "# Release checklist",
        "> Quote from the customer: faster please",
        "| name | owner | due |",
        "1. Pull 2. Build 3. Ship",
        "[Docs](https://docs.example.com/start)",
        "`pip install -e .[dev]` before running the tests",
        "```python",
        "## 周会纪要",
        "- [x] 完成登录页",
        "> 用户原话：希望能导出表格",
        "**注意**：周五不发版",
    ),
    "postal-address": (
        "Our office is at 221B Baker Street, London NW1 6XE",
        "Ship to 42 Harbour Road, Cape Town 8001",
        "Deliveries go to Dock 4, 17 Mill Lane, Leeds LS1 4AP",
        "The venue is 500 Market Street, second floor",
        "北京市海淀区中关村大街27号",
        "上海市浦东新区世纪大道100号15楼",
        "快递寄到深圳市南山区科技园南区8栋",
        "杭州西湖区文三路90号前台代收",
    ),
}


_MONTHS = ("January", "March", "April", "June", "July", "August", "October", "November")
_PRODUCTS = ("Redis", "Terraform", "Kubernetes", "React", "pytest", "Postgres", "Rust", "Vue")
_TASKS = ("the report", "the demo", "the audit", "the migration", "the newsletter", "the review")
_ZH_TASKS = ("季度报告", "客户演示", "安全审计", "数据迁移", "周报", "预算表", "培训材料")


def _templated(rng: random.Random, draw: _Draw) -> list[tuple[str, str]]:
    """Ordinary lines made from templates, to widen the numbers that appear."""

    def short_hash() -> str:
        while True:
            value = "".join(rng.choices(HEX, k=7))
            if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
                return value

    lines: list[tuple[str, str]] = []
    for _ in range(14):
        version = f"{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 30)}"
        lines.append(("version", f"{rng.choice(_PRODUCTS)} {version} is what we run"))
        lines.append(("version", f"{rng.choice(_PRODUCTS)}升级到{version}"))
    for _ in range(12):
        y, m, day = rng.randint(2024, 2027), rng.randint(1, 12), rng.randint(1, 28)
        lines.append(("date", f"{rng.choice(_TASKS).capitalize()} is due {y}-{m:02d}-{day:02d}"))
        lines.append(("date", f"{day} {rng.choice(_MONTHS)} {y}: {rng.choice(_TASKS)} review"))
        lines.append(("date", f"{rng.choice(_ZH_TASKS)}{y}年{m}月{day}日前提交"))
    for _ in range(10):
        h, mi, sec = rng.randint(0, 23), rng.choice((0, 15, 30, 45, 10, 50)), rng.randint(0, 59)
        lines.append(("time", f"The {rng.choice(_TASKS)[4:]} call starts at {h:02d}:{mi:02d}"))
        lines.append(("time", f"最后一次同步是{h:02d}:{mi:02d}:{sec:02d}"))
    for _ in range(8):
        amount = f"{rng.randint(3, 900)}.{rng.randint(0, 99):02d}"
        lines.append(("price", f"{rng.choice(_TASKS).capitalize()} cost ${amount} in total"))
        lines.append(("price", f"{rng.choice(_ZH_TASKS)}的预算是{rng.randint(2, 90) * 100}元"))
    for _ in range(6):
        lines.append(("percentage", f"Error rate fell to {rng.randint(1, 9)}.{rng.randint(0, 9)}%"))
        lines.append(("percentage", f"好评率{rng.randint(80, 99)}%"))
    hash_templates = (
        "Fixed in {h}",
        "Revert {h} if the build breaks",
        "Cherry-pick {h} onto the release branch",
        "Bisect points at {h}",
        "The regression came in with {h}",
        "回滚到{h}",
        "问题是{h}引入的",
        "{h}之后的提交都要重新测",
    )
    for template in hash_templates * 2:
        lines.append(("commit-hash", template.format(h=short_hash())))
    for prefix in ("PAY", "WEB", "INFRA", "DATA", "MOB"):
        lines.append(("ticket", f"{prefix}-{draw.digits(rng.choice((3, 4)))} is next in the queue"))
        lines.append(("ticket", f"需求单{prefix}-{draw.digits(4)}已排期"))
    return lines


class _OrdinaryLines:
    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.items: list[Ordinary] = []

    def add(self, kind: str, line: str) -> None:
        if line not in self.taken:
            self.taken.add(line)
            self.items.append(Ordinary(kind, line))


def _build_ordinary(draw: _Draw, taken: set[str]) -> tuple[Ordinary, ...]:
    o = _OrdinaryLines(taken)
    for kind, lines in _ORDINARY.items():
        for line in lines:
            o.add(kind, line)
    for kind, line in _templated(draw.rng, draw):
        o.add(kind, line)
    return tuple(o.items)


def _build() -> tuple[tuple[Secret, ...], tuple[Ordinary, ...]]:
    draw = _Draw(random.Random(_SEED))
    secrets = _build_secrets(draw)
    return secrets, _build_ordinary(draw, {s.line for s in secrets})


SECRETS, ORDINARY = _build()
"""Every secret and every ordinary line, the same on every import."""
