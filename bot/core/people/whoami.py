"""/whoami: the sender's own ids, where they are, and the allowlist entries that would give them
more rights here. It never shows anyone else's ids."""

from __future__ import annotations

from bot.core.people.context import MessageContext
from bot.core.people.keys import ChatKind, member_scope
from bot.core.people.permissions import Role

_VIEW_SHARED = "view this group's shared blocks (/pin shared list, status and log)"
# What each role may do now, in the chat the sender speaks in.
_MAY = {
    Role.DM_USER: (
        "add, change and remove your own blocks here with every personal /pin command; they "
        "default to strong. Shared blocks exist only in groups"
    ),
    Role.MEMBER: (
        f"add and change your own context blocks here, remove or clear any of your own, and "
        f"{_VIEW_SHARED}. Strong blocks need a strong user or a shared admin"
    ),
    Role.STRONG_USER: (
        f"add and change your own strong and context blocks here, and {_VIEW_SHARED}. Changing "
        "shared blocks needs a shared admin"
    ),
    Role.SHARED_ADMIN: (
        "add and change your own strong and context blocks here, and add, change and remove "
        "this group's shared blocks with every /pin shared command"
    ),
}
# The allowlists that would give a role more rights here: only those it does not have yet.
_TO_ADMIN = "To make you a shared admin, add one of these to pins.group_shared_admin_ids"
_ENTRIES_FOR: dict[Role | None, str] = {
    None: f"{_TO_ADMIN} (for a strong user, to pins.group_strong_user_ids):",
    Role.MEMBER: f"{_TO_ADMIN} (for a strong user, to pins.group_strong_user_ids):",
    Role.STRONG_USER: f"{_TO_ADMIN}:",
}


async def whoami(context: MessageContext) -> str:
    """The /whoami reply for the sender of this message."""
    conversation = context.conversation
    ids = conversation.sender_ids
    kinds = conversation.sender_id_kinds or ("id",) + ("alias",) * (len(ids) - 1)
    lines = [f"Platform: {conversation.platform}"]
    if ids:
        lines.append(
            "Your ids: "
            + ", ".join(f"{value} ({kind})" for value, kind in zip(ids, kinds, strict=False))
        )
    else:
        lines.append("Your ids: none (this message has no sender id)")
    lines.append(
        f"Chat: {conversation.kind.value}"
        + (
            f" {conversation.chat_id}"
            if conversation.kind is not ChatKind.DIRECT and conversation.chat_id
            else ""
        )
    )
    lines.append(f"Session key: {conversation.session_key}")
    if conversation.group_session_key:
        lines.append(f"Group session key: {conversation.group_session_key}")
    lines.append(f"Access: {context.admission.reason}.")
    speaker = context.speaker
    role = await speaker.role()
    if role is None:
        lines.append(f"Pins here: off. {speaker.refusal}")
    else:
        lines.append(f"Pins here: on. You are a {role.value}: you may {_MAY[role]}.")
        if speaker.inherited_admin:
            lines.append(
                f"You are a shared admin because {conversation.platform} says you administer "
                "this group (pins.inherit_platform_admins)."
            )
    group = conversation.group_session_key
    if group and ids and role in _ENTRIES_FOR:
        everywhere = ", ".join(ids)
        here = ", ".join(member_scope(group, value) for value in ids)
        lines.append(_ENTRIES_FOR[role])
        lines.append(f"  in every enabled group: {everywhere}")
        lines.append(f"  in this group only: {here}")
    return "\n".join(lines)
