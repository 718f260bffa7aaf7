"""Secret recognisers side by side (issue 44): ours (`bot.secrets`) and the libraries it
was weighed against, detect-secrets and CredSweeper, scored on the labelled corpus of
tests/core/secrets/corpus.py with tests/core/secrets/scoring.py; and how our recogniser's time
grows with its input, on text crafted to make backtracking patterns quadratic and on ordinary
text.

The libraries are imported only when measured, so importing this module is cheap. They are not
optional: when one is missing the section fails, because a comparison that quietly leaves a
candidate out says nothing (CI installs them).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing
import random
import string
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.core.secrets.scoring import Candidate, ours, score

PLACEHOLDER = "[secret]"
ENTROPY_PLUGINS = ("Base64HighEntropyString", "HexHighEntropyString")

SIZES_FULL = (10_000, 100_000, 1_000_000)
SIZES_QUICK = (10_000, 100_000)
# A timed call still running after this many seconds is stopped, so a quadratic input cannot
# hang the benchmark (the table says so, and the growth target is missed).
LIMIT_QUICK_S = 1.0
LIMIT_FULL_S = 20.0
SENSITIVE_BLOCK_CHARS = 40_000


def _missing(library: str, error: ImportError) -> RuntimeError:
    return RuntimeError(
        f"the secrets section compares ours with {library}, which is not importable here "
        f"({error}); install it (pip install detect-secrets==1.5.0 credsweeper==1.19.5)"
    )


def _masked(text: str, values: Iterable[str]) -> str:
    """Text with every occurrence of each value replaced by the placeholder, longest first (a
    library may report a token and its prefix both)."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, PLACEHOLDER)
    return text


def _scanning(
    name: str,
    found: Callable[[str], list[str]],
    session: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
) -> Candidate:
    """A library candidate: `found(text)` is what one scan reports; a text is refused when it
    reports anything, and redaction masks what it reports. Scored with one scan a line."""

    def judge(text: str) -> tuple[bool, str]:
        values = found(text)
        return bool(values), _masked(text, values)

    return Candidate(
        name=name,
        refuses=lambda text: bool(found(text)),
        redact=lambda text: _masked(text, found(text)),
        session=session or contextlib.nullcontext,
        judge=judge,
    )


def detect_secrets(entropy: bool, verdict: bool = False) -> Candidate:
    """detect-secrets 1.5.0 through `scan_line`, its API for ad-hoc strings, each line of a
    text scanned on its own. Its default settings (every plugin, the default filters), with
    the two entropy plugins disabled unless `entropy`. `scan_line` reports entropy findings
    with no threshold (its "eager search"); with `verdict` only those its CLI's `scan --string`
    marks True (over the plugin's limit) count. Refuses when anything is found; redaction
    masks each reported `secret_value`."""
    try:
        from detect_secrets.core.plugins import initialize
        from detect_secrets.core.scan import scan_line
        from detect_secrets.settings import default_settings
    except ImportError as error:
        raise _missing("detect-secrets", error) from error

    @contextlib.contextmanager
    def session() -> Iterator[None]:
        with default_settings() as settings:
            if not entropy:
                settings.disable_plugins(*ENTROPY_PLUGINS)
            yield

    def counts(secret: Any) -> bool:
        if not verdict:
            return True
        shown: str = initialize.from_secret_type(secret.type).format_scan_result(secret)
        return shown.startswith("True")

    def found(text: str) -> list[str]:
        return [
            str(secret.secret_value or "")
            for line in text.splitlines()
            for secret in scan_line(line)
            if counts(secret)
        ]

    name = "detect-secrets, " + (
        ("entropy over limit" if verdict else "entropy, no limit") if entropy else "no entropy"
    )
    return _scanning(name, found, session)


def credsweeper(ml: bool = True) -> Candidate:
    """CredSweeper 1.19.5 with its default settings, its ML validation included unless not
    `ml` (threshold 0, its way of turning it off; to show what its rules alone find): each text
    is one `StringContentProvider` (a line a line) scanned by `file_scan`, and the candidates go
    through `post_processing`, the ML filter `run()` applies, on one scanner built once.
    Refuses when any candidate is left; redaction masks each candidate's value."""
    try:
        from credsweeper import CredSweeper
        from credsweeper.file_handler.string_content_provider import StringContentProvider
    except ImportError as error:
        raise _missing("CredSweeper", error) from error

    sweeper = CredSweeper() if ml else CredSweeper(ml_threshold=0)

    def found(text: str) -> list[str]:
        with warnings.catch_warnings():
            # StringContentProvider is marked deprecated, with nothing to use instead yet.
            warnings.simplefilter("ignore", DeprecationWarning)
            provider = StringContentProvider(text.splitlines())
        manager = sweeper.credential_manager
        manager.set_credentials(sweeper.file_scan(provider))
        try:
            sweeper.post_processing(None)
            kept = list(manager.get_credentials())  # the manager's own list, cleared below
        finally:
            manager.clear_credentials()
        return [str(data.value or "") for c in kept for data in c.line_data_list]

    return _scanning(f"CredSweeper, ML {'on (default)' if ml else 'off'}", found)


def candidates() -> list[Candidate]:
    """Every candidate of the comparison, ours last."""
    return [
        detect_secrets(entropy=False),
        detect_secrets(entropy=True, verdict=True),
        detect_secrets(entropy=True),
        credsweeper(),
        credsweeper(ml=False),
        ours(),
    ]


# Inputs for the growth table: each makes some backtracking pattern quadratic (or did, in a
# recogniser before this one), plus ordinary text. Built to an exact length in characters.
def _repeated(prefix: str, unit: str) -> Callable[[int, random.Random], str]:
    def build(size: int, rng: random.Random) -> str:
        return (prefix + unit * (size // len(unit) + 1))[:size]

    return build


def _base64(size: int, rng: random.Random) -> str:
    alphabet = string.ascii_letters + string.digits + "+/"
    return "".join(rng.choices(alphabet, k=size))


_CJK = "数据库连接已经建立请检查配置文件中的密码和令牌是否正确用户名服务器地址端口号"
_GLUED = ("token=", "password:", "ghp_", "AKIA", "sk-", "eyJ", "admin@", "10.0.0.", ":8080", "key")


def _cjk_glued(size: int, rng: random.Random) -> str:
    parts: list[str] = []
    length = 0
    while length < size:
        run = "".join(rng.choices(_CJK, k=rng.randint(3, 12)))
        token = rng.choice(_GLUED) + "".join(rng.choices(string.ascii_letters, k=rng.randint(0, 6)))
        parts += (run, token)
        length += len(run) + len(token)
    return "".join(parts)[:size]


CRAFTED: dict[str, Callable[[int, random.Random], str]] = {
    '"[" + "0:"*n': _repeated("[", "0:"),
    '"AKC"*n': _repeated("", "AKC"),
    '"eyJ"*n': _repeated("", "eyJ"),
    '"a"*n': _repeated("", "a"),
    '"password=" * n': _repeated("", "password="),
    '"x@" * n': _repeated("", "x@"),
    '"1." * n': _repeated("", "1."),
    "random base64, no spaces": _base64,
    "CJK with ASCII tokens glued in": _cjk_glued,
}
CRAFTED_QUICK = (
    '"[" + "0:"*n',
    '"eyJ"*n',
    '"password=" * n',
    '"x@" * n',
    "CJK with ASCII tokens glued in",
)


def _ordinary_text(lines: Sequence[str]) -> Callable[[int, random.Random], str]:
    joined = "\n".join(lines) + "\n"

    def build(size: int, rng: random.Random) -> str:
        return (joined * (size // len(joined) + 1))[:size]

    return build


_fresh = itertools.count()


def _cold(text: str) -> str:
    """The text made unlike any before it (a number in front), so no cache can answer it."""
    return f"{next(_fresh)} {text}"


def _time_calls(function: Callable[[str], object], text: str, runs: int, sender: Any) -> None:
    """In the child: up to `runs` cold calls, each one's seconds sent as soon as it is done."""
    for _ in range(runs):
        cold = _cold(text)
        started = time.perf_counter()
        function(cold)
        sender.send(time.perf_counter() - started)


def _timed(function: Callable[[str], object], text: str, runs: int, limit_s: float) -> float | None:
    """The best of up to `runs` cold calls of function on text, made in a forked child so a
    call that takes over `limit_s` (all calls together) can be stopped: None then, or the best
    of those done in time. The child is a copy of this process, so nothing is imported
    again."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_time_calls, args=(function, text, runs, sender), daemon=True)
    child.start()
    sender.close()
    deadline = time.perf_counter() + limit_s
    times: list[float] = []
    try:
        while len(times) < runs and receiver.poll(max(0.0, deadline - time.perf_counter())):
            times.append(receiver.recv())
            if sum(times) > limit_s / 2:
                break  # another call would likely not end in time
    except EOFError as error:
        raise RuntimeError(f"the timing child ended with code {child.exitcode}") from error
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receiver.close()
    return min(times) if times else None


def growth(quick: bool, ordinary_lines: Sequence[str]) -> dict[str, Any]:
    """Seconds of our `redact()` and `credential_kind()` on each input at each size (the best
    of three cold calls, fewer when slow), with the ratio of each size's time to the previous
    one's (10 when linear) and the worst ratio. A call still running after LIMIT_S (quick) or
    LIMIT_FULL_S is stopped: its time is given as None, the sizes above it are not tried, its
    ratio is a lower bound, and `timed_out` is true."""
    from bot import secrets as ours_module

    sizes = SIZES_QUICK if quick else SIZES_FULL
    limit_s = LIMIT_QUICK_S if quick else LIMIT_FULL_S
    inputs = {name: CRAFTED[name] for name in (CRAFTED_QUICK if quick else CRAFTED)}
    inputs["ordinary text (corpus lines)"] = _ordinary_text(ordinary_lines)
    functions: dict[str, Callable[[str], object]] = {
        "redact": ours_module.redact,
        "credential_kind": ours_module.credential_kind,
    }
    rows: list[dict[str, Any]] = []
    worst = 0.0
    for (label, build), (function_name, function) in itertools.product(
        inputs.items(), functions.items()
    ):
        seconds: dict[str, float | None] = {}
        ratios: dict[str, float] = {}
        previous: float | None = None
        for size in sizes:
            taken = _timed(function, build(size, random.Random(44)), 3, limit_s)
            seconds[str(size)] = None if taken is None else round(taken, 6)
            if previous is not None:
                key = f"{_size_label(size)}/{_size_label(size // 10)}"
                ratios[key] = round((limit_s if taken is None else taken) / previous, 1)
                worst = max(worst, ratios[key])
            if taken is None:
                break
            previous = max(taken, 1e-9)
        rows.append(
            {
                "input": label,
                "function": function_name,
                "seconds": seconds,
                "ratios": ratios,
                "timed_out": None in seconds.values(),
            }
        )
    return {
        "sizes": list(sizes),
        "limit_s": limit_s,
        "rows": rows,
        "worst_ratio": worst,
        "timed_out": any(row["timed_out"] for row in rows),
    }


def sensitive_block(lines: Sequence[str]) -> dict[str, Any]:
    """Milliseconds of our `redact()` on a sensitive block of SENSITIVE_BLOCK_CHARS characters
    made of corpus lines (secrets and ordinary text), called once on a text it has never seen
    (cold), and how many characters the redaction changed the length by."""
    from bot import secrets as ours_module

    joined = "\n".join(lines) + "\n"
    block = _cold((joined * (SENSITIVE_BLOCK_CHARS // len(joined) + 1))[:SENSITIVE_BLOCK_CHARS])
    started = time.perf_counter()
    redacted = ours_module.redact(block)
    taken = time.perf_counter() - started
    # What a turn pays: the view of the block the model is sent, once the reply that saved it
    # has read it (`masked_note`), and on every turn after.
    from bot.core.blocks.sensitive import masked_note, shown_content
    from storage.models import BlockState, Level, State

    state = BlockState(_cold(block), Level.CONTEXT, State.ACTIVE, sensitive=True)
    started = time.perf_counter()
    masked_note(state.content)
    saved = time.perf_counter() - started
    started = time.perf_counter()
    shown_content(state)
    turn = time.perf_counter() - started
    return {
        "chars": len(block),
        "redact_ms": round(taken * 1000, 2),
        "save_ms": round(saved * 1000, 2),
        "turn_ms": round(turn * 1000, 3),
        "length_change": len(redacted) - len(block),
    }


def sticky_files(folder: Path) -> dict[str, Any]:
    """Seconds to answer `pinbot import --scope` of an 8,000-slot and a 100 MB Sticky Context
    file (both refused: over the scope's limits), through the command's own function."""
    import asyncio
    import io

    from bot.cli import importing
    from bot.config import parse_config

    config = parse_config({}, "<bench>")
    results: dict[str, Any] = {}
    for name, count, content in (("8,000 slots", 8_000, "note"), ("100 MB", 560_000, "x" * 150)):
        slots = {f"slot{i}": {"content": f"{content} {i}", "priority": 1} for i in range(count)}
        file = folder / f"sticky-{count}.json"
        file.write_text(json.dumps({"version": 2, "slots": slots}), encoding="utf-8")
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = asyncio.run(importing._import(config, str(file), True, "console:direct:1"))
        results[name] = {
            "bytes": file.stat().st_size,
            "seconds": round(time.perf_counter() - started, 3),
            "refused": code == 1,
        }
        file.unlink()
    return results


def _sticky_files_in_a_folder() -> dict[str, Any]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        return sticky_files(Path(folder))


def measure(quick: bool) -> dict[str, Any]:
    """Every candidate's figures on the corpus (tests/core/secrets/corpus.py) as JSON values,
    ours last; the growth table of our recogniser (10k and 100k characters and fewer crafted
    inputs when `quick`, up to 1M otherwise); and the cold redaction of a 40k-character
    sensitive block. Raises RuntimeError when a library candidate is not importable."""
    from tests.core.secrets.corpus import ORDINARY, SECRETS

    started = time.perf_counter()
    chosen = candidates()
    construction_s = time.perf_counter() - started
    figures = {c.name: score(c, SECRETS, ORDINARY).as_json() for c in chosen}
    ordinary_lines = [entry.line for entry in ORDINARY]
    mixed = [
        entry.line for pair in itertools.zip_longest(SECRETS, ORDINARY) for entry in pair if entry
    ]
    return {
        "corpus": {
            "secrets": len(SECRETS),
            "credentials": sum(1 for s in SECRETS if s.credential),
            "ordinary": len(ORDINARY),
        },
        "candidates": figures,
        "construction_s": round(construction_s, 2),
        "growth": growth(quick, ordinary_lines),
        "sensitive_block": sensitive_block(mixed),
        "sticky_files": _sticky_files_in_a_folder(),
        "seconds": round(time.perf_counter() - started, 1),
    }


def targets(figures: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Issue 44's targets for our recogniser on the corpus and in the growth table: each name,
    whether it is met, and the figure."""
    ours_figures = figures["candidates"]["ours"]
    refused = ours_figures["credentials_refused_pct"]
    hidden = ours_figures["secrets_hidden_pct"]
    ordinary_refused = ours_figures["ordinary_refused_pct"]
    changed = ours_figures["ordinary_changed_pct"]
    table = figures["growth"]
    worst = table["worst_ratio"]
    return [
        ("secrets: ours refuses >= 98% of the corpus's credentials", refused >= 98, f"{refused}%"),
        ("secrets: ours hides >= 98% of the corpus's secrets", hidden >= 98, f"{hidden}%"),
        (
            "secrets: ours refuses <= 1% of the corpus's ordinary lines",
            ordinary_refused <= 1,
            f"{ordinary_refused}%",
        ),
        (
            "secrets: ours changes <= 2% of the corpus's ordinary lines",
            changed <= 2,
            f"{changed}%",
        ),
        (
            "secrets: ours grows <= 15x per 10x input (crafted and ordinary text)",
            worst <= 15 and not table["timed_out"],
            f"worst {'over ' if table['timed_out'] else ''}{worst}x",
        ),
        (
            "secrets: a 40k-character sensitive block adds < 20 ms to a turn (after its save)",
            figures["sensitive_block"]["turn_ms"] < 20,
            f"{figures['sensitive_block']['turn_ms']} ms (the save reads it: "
            f"{figures['sensitive_block']['save_ms']} ms)",
        ),
        *(
            (
                f"Sticky import of {name} answered in < 1 s",
                sticky["seconds"] < 1 and sticky["refused"],
                f"{sticky['seconds']} s",
            )
            for name, sticky in figures["sticky_files"].items()
        ),
    ]


def _size_label(size: int) -> str:
    return f"{size // 1_000_000}M" if size >= 1_000_000 else f"{size // 1000}k"


def print_section(figures: dict[str, Any]) -> None:
    """The candidates' figures on the corpus as a table (candidate, credentials refused,
    secrets hidden, ordinary refused, ordinary changed, µs a line), then our growth table and
    the sensitive block's redaction time."""
    corpus = figures["corpus"]
    print(
        f"\nSecret recognisers on the corpus ({corpus['credentials']} credentials among "
        f"{corpus['secrets']} secrets, {corpus['ordinary']} ordinary lines); µs a line: the mean "
        "time to decide its refusal and redact it (one scan for a library)"
    )
    header = ("candidate", "creds refused", "secrets hidden", "ord. refused", "ord. changed")
    print(f"{header[0]:<34} | " + " | ".join(f"{h:>14}" for h in header[1:]) + " | µs/line")
    for name, f in figures["candidates"].items():
        cells = (
            f"{f['credentials_refused_pct']:.1f}% ({f['credentials_refused']})",
            f"{f['secrets_hidden_pct']:.1f}% ({f['secrets_hidden']})",
            f"{f['ordinary_refused_pct']:.1f}% ({f['ordinary_refused']})",
            f"{f['ordinary_changed_pct']:.1f}% ({f['ordinary_changed']})",
        )
        print(
            f"{name:<34} | "
            + " | ".join(f"{c:>14}" for c in cells)
            + f" | {f['us_per_line']:>7,.0f}"
        )
    table = figures["growth"]
    sizes = table["sizes"]
    print("\nOur recogniser's time by input size, ms (ratio to the size 10x smaller; linear ≈ 10)")
    labels = [_size_label(s) for s in sizes]
    print(f"{'input':<32} {'function':<16}" + "".join(f"{label:>12}" for label in labels))
    for row in table["rows"]:
        timings = []
        for size in sizes:
            key = str(size)
            taken = row["seconds"].get(key)
            if key not in row["seconds"]:
                timings.append("-")
            elif taken is None:
                timings.append(f"> {table['limit_s'] * 1000:,.0f}")
            else:
                timings.append(f"{taken * 1000:,.1f}")
        over = ">" if row["timed_out"] else ""
        ratios = "  ".join(
            f"{k} {over if k == list(row['ratios'])[-1] else ''}{v}x"
            for k, v in row["ratios"].items()
        )
        print(
            f"{row['input']:<32} {row['function']:<16}"
            + "".join(f"{t:>12}" for t in timings)
            + f"   {ratios}"
        )
    block = figures["sensitive_block"]
    print(
        f"Worst ratio {'over ' if table['timed_out'] else ''}{table['worst_ratio']}x. "
        f"A {block['chars']:,}-character sensitive block "
        f"redacted cold in {block['redact_ms']:,.1f} ms; a turn after its save reads it in "
        f"{block['turn_ms']} ms. Sticky import answered: "
        + ", ".join(f"{k} in {v['seconds']} s" for k, v in figures["sticky_files"].items())
        + f". Section took {figures['seconds']} s "
        f"(building the candidates {figures['construction_s']} s)."
    )
