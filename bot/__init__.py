"""pinbot: a chat-bot frontend that puts an LLM in DMs and groups with pinned context blocks."""


def package_version() -> str:
    """The installed pinbot's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pinbot")
    except PackageNotFoundError:
        return "unknown (not installed)"
