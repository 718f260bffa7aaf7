"""Secrets as people write them, which no scanner of source files reads: a secret word and its
value in English or Chinese prose, env lines, YAML and JSON (`DB_PASSWORD=…`, `"password": "…"`,
`my password was …`, `密码：…`, `我的密码是…`, `the PIN is 4821`), Authorization headers, `curl -u`,
connection URLs with a password, and the provider shapes detect-secrets has no plugin for."""

from __future__ import annotations

import re

from bot.secrets._rule import SECRET, TOKEN, Match, Rule, compile_re2

# Longer names first: at one place the first that fits is taken ("secret access key", not
# "secret" with "access" as its value).
_ENGLISH_WORDS = (
    r"(?:aws[ _-]?)?secret[ _-]?access[ _-]?key|client[ _-]?secret|private[ _-]?key|"
    r"secret[ _-]?key|access[ _-]?key|access[ _-]?token|auth[ _-]?token|refresh[ _-]?token|"
    r"api[ _-]?key|apikey|pass(?:word|wd|phrase|code)?|pwd|pw|secret|token|credentials?|creds|"
    r"(?:door|gate|alarm|safe|entry|lock|garage|access|wifi|wi-fi)[ _-]?code|combination|"
    r"(?:2fa|mfa|otp|totp)[ _-]?(?:seed|secret|key)|(?:recovery|backup)[ _-]?codes?|key"
)
_CHINESE_WORDS = (
    r"密码|口令|密钥|秘钥|令牌|私钥|验证码|授权码|通行码|门禁码|门禁密码|开门密码|密 码"
)
# A separator after the word: `=`, `:` (`：` is folded to it), `=>`, ` - `, "is"/"was" (with
# "set to"), Chinese 是/为/改成, or none at all (then the value must look like a secret; in
# Chinese the value may follow the word directly).
_SEPARATOR = (
    r"(?P<sep>\s*(?:=>|:=|-+>|>>|[:=~])\s*|\s+[-—–]+\s+|'s\s+|"
    r"\s+(?:is|was|are|were)\s+(?:(?:set\s+to|now)\s+)?|"
    r"\s*(?:(?:已经|已)?(?:改成了?|改为|换成了?|设为|设置为|设置成|更新为)|是|为|為)\s*|\s*)"
)
# A value: quoted, or a run of printable ASCII without quotes, commas or semicolons (Chinese
# around it is not part of it). Bounded, so no match runs far past its value.
_VALUE = (
    r"(?P<value>\"[^\"\n]+\"|'[^'\n]+'|"
    r"[\x21\x23-\x26\x28-\x2b\x2d-\x3a\x3c-\x7e]+)"
)

# Words that follow a secret word in ordinary prose ("the password is required", "token: use the
# one from the vault") rather than a secret.
_PROSE = frozenset(
    """
    a an the to that this these those it its not no now also still just only very too so in on
    at of for from with by as and or but if then than when where which who what how your my our
    their his her all any some one same different never always being been be is are was were
    will would should can could may might must required optional needed mandatory wrong
    incorrect correct right invalid valid expired missing empty weak strong long short secure
    safe new old changed reset set stored saved encrypted hashed hidden secret unknown
    easy hard simple important use see ask check get find read look contact call case-sensitive
    request rotate change update send keep store put please none null nil true false yes tbd
    todo here there below above same sent given shared generated provided revoked rotated limits
    limit per each every counts count usage used more less free paid manager vault file env
    environment variable variables config settings setting field fields string value values
    length format type
    """.split()  # noqa: SIM905
)
_REFERENCE_STARTS = ("$", "<", "{{", "%(", "*", "…", "...", "[")
_COUNT = re.compile(r"[\d,._]+[kKmM]?")
_SIGN_CHARACTERS = frozenset("0123456789!#$%&*+/=?@^_~-")


def looks_secret(value: str) -> bool:
    """Whether a word reads as a password rather than as a word: a digit or symbol in it, or
    capitals after its first letter (hunter2, Tr0ub4dor, s3cr3t!, xKq9Lm)."""
    if not any(character.isalnum() for character in value):
        return False  # "->", "--": punctuation between a word and its value
    if any(character in _SIGN_CHARACTERS for character in value):
        return not _reads_as_words(value)
    return any(character.isupper() for character in value[1:]) and not value.isupper()


_JOINED_WORDS = re.compile(r"[a-z]+(?:[-_][a-z]+)+")
# Code naming a place (settings.API_KEY, os.environ): single-case words joined by dots.
_DOTTED_NAME = re.compile(r"(?:[a-z_]+|[A-Z_]+)(?:\.(?:[a-z_]+|[A-Z_]+))+")
_FRACTION = re.compile(r"\d+[/:.]\d+")
_PATH_PART = re.compile(r"[a-z][a-z_.-]*")


def _reads_as_words(value: str) -> bool:
    """Words joined by hyphens or underscores (old-certs, your-api-key), a dotted name
    (settings.API_KEY), a fraction or ratio (3/5): symbols that do not make a password."""
    if _JOINED_WORDS.fullmatch(value):
        return all(wordlike(part) for part in re.split("[-_]", value))
    return bool(_DOTTED_NAME.fullmatch(value) or _FRACTION.fullmatch(value))


# What stands where a value would but is none: a reference to one, a type, a password manager,
# a placeholder.
_NOT_VALUES = frozenset(
    [
        "str",
        "string",
        "int",
        "bool",
        "bytes",
        "none",
        "null",
        "nil",
        "optional",
        "any",
        "object",
        "bitwarden",
        "1password",
        "keepass",
        "lastpass",
        "keychain",
        "vault",
        "redacted",
        "placeholder",
        "hidden",
        "masked",
        "omitted",
        "removed",
        "tbd",
        "n/a",
    ]
)


def _no_value(bare: str, word: str) -> bool:
    """Whether bare, standing after a secret word, is no secret: a reference, a type, a path,
    code, a placeholder (`YOUR_TOKEN_HERE`, `xxxxxxxx`), or the word itself (password=password)."""
    lower = bare.lower()
    if lower in _PROSE or lower in _NOT_VALUES or lower == word.lower():
        return True
    if len(set(bare)) == 1 or lower.startswith(("your", "my_", "my-")) or lower.endswith("here"):
        return True
    if bare.startswith(("/", "~/", "./", "../", "-")) or (
        len(bare) > 2 and bare[1:3] in (":\\", ":/")
    ):
        return True  # a path (where a key is kept, not the key) or a command's option
    if "/" in bare and all(not part or _PATH_PART.fullmatch(part) for part in bare.split("/")):
        return True  # src/, docs/keys.md
    if _DOTTED_NAME.fullmatch(bare):
        return True  # settings.API_KEY, os.environ: code naming where the value is
    return any(character in "()[]{}" for character in bare)  # code: get_token(), environ["X"]


def _prefix_allowed(prefix: str, word: str) -> bool:
    """The secret word ends a name (DB_PASSWORD, db.pass, dbPassword), never sits inside a word
    (Compass, bypass)."""
    if not prefix:
        return True
    if prefix.isupper() and word.isupper():  # PGPASSWORD, DBPASS: an environment variable
        return True
    return prefix[-1] in "_.-" or (
        (prefix[-1].islower() or prefix[-1].isdigit()) and word[0].isupper()
    )


def _next_word(text: str, end: int) -> str | None:
    """The word right after a value, or None when its clause ends there (a line end,
    punctuation, a non-word, Chinese): "password: letmein" ends, "Secret= santa gifts" goes on."""
    rest = text[end : end + 40]
    if rest[:1] == "'" and rest[1:2].isalpha():  # secret: don't tell (a contraction goes on)
        return rest[1:2]
    if rest[:1] in (" ", "\t") and rest[1:2].isascii() and rest[1:2].isalpha():
        word = rest[1:].split(None, 1)[0] if rest[1:].strip() else ""
        return "".join(character for character in word if character.isalpha()).lower() or None
    return None


# Words that end a value's noun phrase rather than continue prose ("password: vtctvxuq for the
# deploy"): after one of them the value stands alone.
_CONNECTIVES = frozenset(
    """
    for to in on at and or when if from with then but so please until before after via is are
    was were as because since unless
    """.split()  # noqa: SIM905
)
# The commonest letter pairs of English: a value made mostly of them reads as a word.
_BIGRAMS = frozenset(
    """
    th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io le ve
    co me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur ca el ta la ns di fo ho pe ec pr no
    ct us ac ot il tr ly nc et ut ss so rs un lo wa ge ie wh ee wi em ad ol rt po we na ul ni ts
    mo ow pa im mi ai sh ir su id os iv ia am fi ci vi pl ig tu ev ld ry mp fe bl ab gh ty op wo
    sa ay ex ke fr oo av ag if ap gr od bo sp rd do uc bu ei ov by rm ep tt oc fa ef cu rn sc gi
    da yo cr cl du ga qu ue ff ba ey ls va um pp ua up lu go ht ru ug ds lt pi rc rr eg au ck ew
    mu br bi pt ak pu ui rg ib tl ny ki rk ys ob mm fu ph og ms ye ud mb ip ub oi rl gu dr hr cc
    tw ft wn nu af hu nn eo vo rv nf xp gn sm fl iz ok nl my gl aw ju oa eq sy sl ps jo lf nv je
    nk kn gs dy hy ze ks xt bs ik dd cy rp sk xi oe oy ws lv dl rf eu dg wr xa yi nm eb rb tm xc
    eh tc gy
    """.split()  # noqa: SIM905
)


def wordlike(value: str) -> bool:
    """Whether a run of letters reads as an English word (most of its letter pairs are common
    ones), not as random letters."""
    letters = value.lower()
    pairs = [letters[i : i + 2] for i in range(len(letters) - 1)]
    if not pairs:
        return True
    return sum(pair in _BIGRAMS for pair in pairs) >= 0.75 * len(pairs)


def _accept_keyword(match: Match, text: str) -> bool:
    word = match.group("word")
    if not _prefix_allowed(match.group("prefix") or "", word):
        return False
    value = match.group("value")
    if word.lower() == "key":  # only ending a name (ENCRYPTION_KEY, ibm_iam_key), and a key's value
        bare = value.strip("\"'").rstrip(".,!?:)")
        return bool(match.group("prefix")) and len(bare) >= 8 and looks_secret(bare)
    if value[0] in "\"'":
        inner = value[1:-1].strip()
        return (
            bool(inner) and not inner.startswith(_REFERENCE_STARTS) and not _no_value(inner, word)
        )
    bare = value.strip("*`").rstrip(".,!?:)").strip("*`")
    if not bare or bare.startswith(_REFERENCE_STARTS) or _no_value(bare, word):
        return False
    separator = match.group("sep").strip()
    if not match.group("sep"):  # "tokens2fa": the word runs on into the value
        return False
    if _COUNT.fullmatch(bare) and (word.lower().endswith("token") or len(bare) < 4):
        return False  # "token: 4096", "password: 8 characters" are counts, not secrets
    if looks_secret(bare):
        return True
    if word.lower() in ("pass", "pw", "combination") and not _account_before(text, match.start()):
        return False  # mountain pass: Stelvio, boarding pass: gate (but db pass = swordfish)
    if not separator:  # "wifi passcode tulip": a plain word right after the word is prose
        return False
    following = _next_word(text, match.end() - (len(value) - len(bare)))
    return following is None or following in _CONNECTIVES or not wordlike(bare)


# Words before "pass" that make it a password's (db pass = swordfish), not a mountain's.
_ACCOUNTS = frozenset(
    (
        "db",
        "database",
        "admin",
        "root",
        "user",
        "users",
        "account",
        "login",
        "ssh",
        "vpn",
        "wifi",
        "server",
        "mail",
        "email",
        "ftp",
        "sql",
        "mysql",
        "postgres",
        "redis",
        "router",
        "portal",
    )
)


def _account_before(text: str, start: int) -> bool:
    words = text[max(0, start - 24) : start].lower().split()
    return bool(words) and words[-1].strip("_-.:") in _ACCOUNTS


def _accept_option_value(match: Match, text: str) -> bool:
    value: str = match.group("value").strip("'\"")
    return bool(value) and not value.startswith(_REFERENCE_STARTS) and value[0] != "-"


def _accept_pin(match: Match, text: str) -> bool:
    start = match.start()
    return start == 0 or text[start - 1] != "/"


def _accept_secretish(match: Match, text: str) -> bool:
    value: str = match.group("value").rstrip(".,!?:)")
    return looks_secret(value) and not value.startswith(_REFERENCE_STARTS)


def _accept_url(match: Match, text: str) -> bool:
    password = match.group("value").partition(":")[2]
    return bool(password) and not password.startswith(_REFERENCE_STARTS)


def _rule(kind: str, pattern: str, **options: object) -> Rule:
    return Rule(kind, compile_re2(pattern), **options)  # type: ignore[arg-type]


def phrasing_rules() -> list[Rule]:
    """Our rules for secrets in prose, headers, URLs, and provider shapes detect-secrets lacks."""
    return [
        *(
            _rule(
                kind,
                pattern,
                credential=True,
                placeholder=TOKEN,
                word_before=True,
                whole_token=True,
            )
            for kind, pattern in _PROVIDER_SHAPES
        ),
        _rule(
            "a password or secret",
            rf"(?i)(?P<name>(?P<prefix>[A-Za-z0-9_.-]*?)(?P<word>{_ENGLISH_WORDS})|"
            rf"(?P<zh>{_CHINESE_WORDS}))(?:'s|[\"'\]*_`]{{0,2}}){_SEPARATOR}{_VALUE}",
            credential=True,
            placeholder=SECRET,
            group="value",
            trim=True,
            accept=_accept_chinese_or_keyword,
        ),
        _rule(
            "a password or secret",
            rf"(?i)(?:{_ENGLISH_WORDS}|pin)\s+(?:for|of|to|on)\s+(?:[A-Za-z0-9_.'-]+\s+){{0,5}}?"
            r"(?:is|was|=|:)\s+(?P<value>[\x21\x23-\x26\x28-\x2b\x2d-\x3a\x3c-\x7e]{4,})",
            credential=True,
            group="value",
            word_before=True,
            trim=True,
            accept=_accept_secretish,
        ),
        _rule(
            "a password or secret",
            r"(?i)use\s+(?P<value>[\x21\x23-\x26\x28-\x2b\x2d-\x3a\x3c-\x7e]{4,})\s+as\s+"
            rf"(?:the\s+|my\s+|your\s+|our\s+|a\s+)?(?:new\s+)?(?:{_ENGLISH_WORDS}|pin)",
            credential=True,
            group="value",
            word_before=True,
            accept=_accept_secretish,
        ),
        *(
            _rule(
                "a PIN",
                pattern,
                credential=True,
                group="value",
                word_before=True,
                word_after=True,
                accept=_accept_pin,
            )
            for pattern in _PIN_PATTERNS
        ),
        _rule(
            "a password on a command line",
            r"(?i)(?:(?:mysql|mysqladmin|mysqldump|mariadb)\s[^\n]*?\s-p|sshpass\s+-p\s*|"
            r"(?:docker|podman|nerdctl|helm)\s+(?:registry\s+)?login\s[^\n]*?\s-p\s+|"
            r"\s--(?:password|passwd|pass|token|api-key|secret)(?:=|\s+))"
            r"(?P<value>'[^'\n]+'|\"[^\"\n]+\"|[^\s'\"]+)",
            credential=True,
            group="value",
            trim=True,
            accept=_accept_option_value,
        ),
        _rule(
            "an Authorization header",
            r"(?i)(?:proxy-)?authorization\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest|bot)\s+)?"
            r"(?P<value>[A-Za-z0-9._~+/=:-]{8,})",
            credential=True,
            placeholder=TOKEN,
            group="value",
            word_before=True,
        ),
        _rule(
            "a Bearer token",
            r"(?i)bearer\s+(?P<value>[A-Za-z0-9._~+/=-]{12,})",
            credential=True,
            placeholder=TOKEN,
            group="value",
            word_before=True,
            accept=_accept_secretish,
            sign="bearer",
            folded_sign=True,
        ),
        _rule(
            "a Basic credential",
            r"(?i)basic(?:\s+auth)?\s+(?P<value>[A-Za-z0-9+/]{12,}={0,2})",
            credential=True,
            placeholder=TOKEN,
            group="value",
            word_before=True,
            word_after=True,
            accept=_accept_secretish,
            sign="basic",
            folded_sign=True,
        ),
        _rule(
            "a user:password pair",
            r"(?:^|\s)(?:-u|--user)(?:\s+|=)?(?P<value>\"[^\"\n:]*:[^\"\n]+\"|'[^'\n:]*:[^'\n]+'|"
            r"[^\s:\"']+:[^\s\"']+)",
            credential=True,
            group="value",
        ),
        _rule(
            "a URL with a password",
            r"[A-Za-z][A-Za-z0-9+.-]+://(?P<value>[^\s/:@\[\]]*:[^\s/@\[\]]+)@",
            credential=True,
            group="value",
            word_before=True,
            accept=_accept_url,
            sign="://",
        ),
        _rule(
            "an Azure key or signature",
            r"(?i)(?:AccountKey|SharedAccessKey|SharedAccessSignature|[?&;]sig)="
            r"(?P<value>[A-Za-z0-9%+/=_-]{20,})",
            credential=True,
            group="value",
        ),
    ]


def _accept_chinese_or_keyword(match: Match, text: str) -> bool:
    if match.group("zh"):
        value = match.group("value")
        bare = value.strip("\"'").rstrip(".,!?:)")
        return bool(bare) and not bare.startswith(_REFERENCE_STARTS) and bare.lower() not in _PROSE
    return _accept_keyword(match, text)


# A PIN: "PIN 4821", "PIN code: 4821", "pin码 4821", and in lower case only with a separator
# ("pin: 4821", "pin is 4821"; "/pin add" is a command).
_PIN_PATTERNS = (
    r"(?P<name>PIN(?:\s*(?:code|number|码))?|(?i:pin)\s*(?:code|number|码)|pin码)"
    r"(?P<sep>\s*(?:=|:|是|为)\s*|\s+(?:is|was)\s+|\s+)(?P<value>\d{4,8})",
    r"(?i)pin\s*(?:[:=]|is|was)\s*(?P<value>\d{4,8})",
)

# Provider shapes detect-secrets 1.5 has no plugin for (or only an older form of).
_PROVIDER_SHAPES = (
    ("an Anthropic API key", r"sk-ant-[A-Za-z0-9_-]{20,}"),
    ("an OpenAI API key", r"sk-(?:proj-|svcacct-|admin-|live-|test-)?[A-Za-z0-9_-]{20,}"),
    ("a Google API key", r"AIza[0-9A-Za-z_-]{35}"),
    ("a GitHub token", r"(?:github_pat_[A-Za-z0-9_]{22,}|gh[pousr]_[A-Za-z0-9]{30,})"),
    ("an npm token", r"npm_[A-Za-z0-9]{36}"),
    ("a Stripe key", r"(?:(?:sk|rk)_(?:live|test)_[0-9a-zA-Z]{16,}|whsec_[A-Za-z0-9]{24,})"),
    ("a Slack token", r"xox[abposre]-[A-Za-z0-9-]{10,}"),
    ("a Hugging Face token", r"hf_[A-Za-z0-9]{30,}"),
    ("a Shopify token", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    ("a DigitalOcean token", r"do[opr]_v1_[a-f0-9]{64}"),
    (
        "a Discord webhook",
        r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[\w-]+",
    ),
    (
        "a Teams webhook",
        r"https://[\w.-]*(?:webhook\.office\.com/webhookb2|outlook\.office\.com/webhook)/\S+",
    ),
    ("a Google OAuth token", r"(?:ya29\.[0-9A-Za-z_-]{20,}|GOCSPX-[0-9A-Za-z_-]{20,})"),
    ("a Vault token", r"hv[sbr]\.[A-Za-z0-9_-]{20,}"),
)
