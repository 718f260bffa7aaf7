"""/whoami: the sender's own ids, where they are, and the allowlist entries that would give them
more rights here. It never shows anyone else's ids."""

from __future__ import annotations

from bot.core.context import MessageContext
from bot.core.conversation import ChatKind
from bot.core.keys import member_scope
from bot.core.permissions import Role

_MAY = {
    Role.DM_USER: "all personal /pin commands; blocks default to strong",
    Role.MEMBER: "your own context blocks, and viewing this group's shared blocks",
    Role.STRONG_USER: "your own strong and context blocks, and viewing shared blocks",
    Role.SHARED_ADMIN: "your own blocks and every /pin shared command",
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
        lines.append(f"Pins here: on. You are a {role.value}: you may use {_MAY[role]}.")
        if speaker.inherited_admin:
            lines.append(
                f"You are a shared admin because {conversation.platform} says you administer "
                "this group (pins.inherit_platform_admins)."
            )
    group = conversation.group_session_key
    if group and ids:
        everywhere = ", ".join(ids)
        here = ", ".join(member_scope(group, value) for value in ids)
        lines.append(
            "To make you a shared admin, add one of these to "
            "pins.group_shared_admin_ids (for a strong user, to "
            "pins.group_strong_user_ids):"
        )
        lines.append(f"  in every enabled group: {everywhere}")
        lines.append(f"  in this group only: {here}")
    return "\n".join(lines)
