"""The configuration: the example file documents every key with its default, and bad files are
refused with the key and the file named."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from bot.config import Config, ConfigError, Retention, load_config, parse_config

EXAMPLE = Path(__file__).resolve().parents[1] / "config.example.yaml"


def keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    found = set()
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found |= keys(annotation, f"{key}.")
        else:
            found.add(key)
    return found


def test_example_file_holds_every_key_at_its_default() -> None:
    loaded = load_config(EXAMPLE)
    # storage.path is given relative: the config file's neighbour, wherever pinbot runs from.
    assert loaded.storage.path == str(EXAMPLE.parent / Config().storage.path)
    default = Config()
    assert loaded == default.model_copy(
        update={"storage": default.storage.model_copy(update={"path": loaded.storage.path})}
    )
    text = EXAMPLE.read_text(encoding="utf-8")
    for key in keys(Config):
        assert f"{key.rsplit('.', 1)[-1]}:" in text, key


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"pins": {"max_blocks_per_session": 0}}, "pins.max_blocks_per_session"),
        ({"pins": {"group_whitelist": "nope"}}, "pins.group_whitelist"),
        ({"storage": {"path": 5}}, "storage.path"),
        ({"surprise": 1}, "surprise"),
        ({"logging": {"json": "maybe"}}, "logging.json"),
        ({"llm": {"stream_timeout_s": 0}}, "llm.stream_timeout_s"),
        ({"llm": {"stream_timeout_s": 3601}}, "llm.stream_timeout_s"),
        ({"logging": {"format": "yaml"}}, "logging.format"),
        ({"metrics": {"listen": "9464"}}, "metrics.listen"),
        ({"metrics": {"listen": "127.0.0.1:65536"}}, "metrics.listen"),
        ({"metrics": {"listen": "127.0.0.1:port"}}, "metrics.listen"),
        ({"metrics": {"listen": ":9464"}}, "metrics.listen"),
    ],
)
def test_errors_name_the_key(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "my.yaml")
    assert key in str(caught.value) and "my.yaml" in str(caught.value)


def test_ids_may_be_integers_or_strings() -> None:
    pins = parse_config({"pins": {"group_shared_admin_ids": [7, "8", -100123]}}).pins
    assert pins.group_shared_admin_ids == ["7", "8", "-100123"]


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pins: [unclosed", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize(
    ("label", "problem"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("x" * 61, "is 61 characters long; the limit is 60"),
        ("two\nlines", "must be one line"),
        ("tab\there", "must be one line"),
        ("rules [v2]", "must not contain [ or ]"),
        ("rules]", "must not contain [ or ]"),
        ("invisible\u200bmark", "must be one line"),
    ],
)
def test_a_header_label_is_one_line_of_at_most_60_characters_without_brackets(
    label: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"pins": {"header_label": label}}, "my.yaml")
    assert f"pins.header_label: {problem}" in str(caught.value)


def test_a_good_header_label() -> None:
    assert parse_config({}).pins.header_label == "pinned rules"
    label = "STICKY CONTEXT (survives compaction)"
    assert parse_config({"pins": {"header_label": f" {label} "}}).pins.header_label == label
    assert parse_config({"pins": {"header_label": "x" * 60}}).pins.header_label == "x" * 60


def test_retention_defaults_and_the_older_pins_keys() -> None:
    """retention: gives each kind its days; block versions and the audit trail follow the older
    pins keys unless retention gives them, and then pins reads the retention in effect too
    (whatever reads pins.history_days keeps agreeing with the job)."""
    assert parse_config({}).retention_in_effect == Retention(90, 30, 400, 180, 7, 30)
    older = parse_config({"pins": {"history_days": 60, "audit_retention_days": 365}})
    assert older.retention_in_effect == Retention(90, 60, 400, 365, 7, 30)
    assert older.replaced_pins_keys == {}
    both = parse_config(
        {
            "pins": {"history_days": 60, "audit_retention_days": 20},
            "retention": {"versions_days": 14, "audit_days": 20, "conversation_days": 1},
        }
    )
    assert both.retention_in_effect == Retention(1, 14, 400, 20, 7, 30)
    assert (both.pins.history_days, both.pins.audit_retention_days) == (14, 20)
    assert both.replaced_pins_keys == {"history_days": 60}  # 20 was given both ways
    newer = parse_config({"retention": {"versions_days": 7, "removed_group_days": 1}})
    assert (newer.pins.history_days, newer.retention_in_effect.removed_group) == (7, 1)
    assert newer.replaced_pins_keys == {}


@pytest.mark.parametrize(
    ("retention", "problem"),
    [
        ({"usage_days": 30}, "retention.usage_days: Input should be greater than or equal to 31"),
        ({"conversation_days": 0}, "retention.conversation_days: Input should be greater"),
        ({"inbox_days": 3651}, "retention.inbox_days: Input should be less than or equal to 3650"),
        ({"audit_days": True}, "retention.audit_days"),
        ({"history_days": 5}, "retention.history_days: unknown key"),
    ],
)
def test_retention_ranges_and_keys(retention: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"retention": retention}, "my.yaml")
    assert problem in str(caught.value) and "my.yaml" in str(caught.value)


@pytest.mark.parametrize(
    ("listen", "address"),
    [
        ("", None),
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:9464", ("::1", 9464)),
        ("metrics.internal:9100", ("metrics.internal", 9100)),
    ],
)
def test_the_metrics_listener_address(listen: str, address: tuple[str, int] | None) -> None:
    assert parse_config({"metrics": {"listen": listen}}).metrics.address == address


@pytest.mark.parametrize(
    ("listen", "said"),
    [
        ("[::1:9464", "an IPv6 address needs both [ and ]"),
        ("a b:1", "holds a space"),
        ("host:\u0663", "the port '\u0663' is not a number from 0 to 65535"),  # an Arabic-Indic 3
        ("host:+80", "the port '+80' is not a number from 0 to 65535"),
        ("::1:9464", "an IPv6 address goes inside [ ]"),
        ("[nope]:9464", "'nope' inside [ ] is not an IPv6 address"),
        ("host_\u00e9:80", "is not a host name or address"),
        ("127.0.0.1:65536", "the port '65536' is not a number from 0 to 65535"),
    ],
)
def test_a_bad_metrics_listen_address_says_what_is_wrong(listen: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"metrics": {"listen": listen}}, "my.yaml")
    message = str(caught.value)
    assert "metrics.listen" in message and said in message, message
    assert '"[::1]:9464"' in message  # and how to write it


async def test_any_free_port_on_a_name_of_several_addresses_is_one_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host name resolving to 127.0.0.1 and ::1 with port 0 listened on one free port per
    address, and the log named only the first: it listens on one address now."""
    from aiohttp import web

    from bot.serving import serve_app

    real = socket.getaddrinfo

    def both(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "twice.test":
            return real(host, port, *args, **kwargs)
        return [
            *real("127.0.0.1", port, *args, **kwargs),
            *real("::1", port, *args, **kwargs),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", both)
    runner, port = await serve_app(
        web.Application(), host="twice.test", port=0, port_setting="metrics.listen"
    )
    try:
        assert [address[:2] for address in runner.addresses] == [("127.0.0.1", port)]
    finally:
        await runner.cleanup()


def test_a_relative_storage_path_is_the_config_files_neighbour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "bot"
    folder.mkdir()
    (folder / "config.yaml").write_text("storage: {path: data/pins.sqlite3}\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # started from another folder
    loaded = load_config("bot/config.yaml")
    assert loaded.storage.path == str(folder.resolve() / "data" / "pins.sqlite3")
    (folder / "memory.yaml").write_text("storage: {path: ':memory:'}\n", encoding="utf-8")
    assert load_config(folder / "memory.yaml").storage.path == ":memory:"
