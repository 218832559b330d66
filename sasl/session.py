"""Session lifetime for re-authentication (KIP-368), shared by every mechanism."""

from __future__ import annotations


def session_lifetime_ms(
    now_ms: int, credential_expiry_ms: int | None, max_reauth_ms: int | None
) -> int | None:
    """How long an authenticated session may live; None = no limit (Kafka's 0 on the wire).

    Kafka's `calcCompletionTimesAndReturnSessionLifetimeMs`: the configured maximum
    (`connections.max.reauth.ms`, only when positive), the credential's remaining life, or the
    smaller of both. An already expired credential gives 0: the caller must refuse it (Kafka would
    send 0, which its clients read as "no expiry").
    """
    limits: list[int] = []
    if max_reauth_ms is not None and max_reauth_ms > 0:
        limits.append(max_reauth_ms)
    if credential_expiry_ms is not None:
        limits.append(max(0, credential_expiry_ms - now_ms))
    return min(limits) if limits else None
