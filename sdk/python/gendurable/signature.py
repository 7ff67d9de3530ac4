"""Standard Webhooks signatures, as the server sends them (webhook/signature.go).

``webhook-signature`` holds one or more space-separated ``v1,<base64 HMAC-SHA256>`` of
``id + "." + timestamp + "." + body``, keyed with the base64-decoded part of a
``whsec_…`` secret; several are sent while a handler's secret rotates.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets as _secrets
import time
from collections.abc import Iterable
from typing import Mapping, Optional, Sequence, Union

from .errors import SignatureError

HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE = 300  # seconds, as the server's webhook.DefaultTolerance

Secrets = Union[str, Sequence[str]]


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(32)).decode()


_BASE64 = re.compile(r"[A-Za-z0-9+/]*=*")


def secret_problem(secret: object) -> Optional[str]:
    """What is wrong with a signing secret, or ``None`` when Standard Webhooks accepts it:
    an optional ``whsec_`` prefix, then the HMAC key in standard base64 (padding optional),
    at least one byte long. The answer never quotes the secret."""
    if secret is None:
        return "is missing"
    if not isinstance(secret, str):
        return f"must be a string (got {type(secret).__name__})"
    if secret == "":
        return "is empty"
    raw = secret[len(SECRET_PREFIX):] if secret.startswith(SECRET_PREFIX) else secret
    if any(c.isspace() for c in raw):
        return "has whitespace in it (a trailing newline?)"
    if raw == "":
        return "has an empty key (nothing after whsec_)"
    if not _BASE64.fullmatch(raw):
        return ("is not whsec_ followed by base64 "
                "(it has characters outside A-Z, a-z, 0-9, + and /, or = before the end)")
    data = raw.rstrip("=")
    rest, padding = len(data) % 4, len(raw) - len(data)
    if rest == 1 or (padding and padding != (4 - rest) % 4):
        return "is not whsec_ followed by base64 (its length does not fit base64: cut short, or wrong = padding)"
    return None


def _key(secret: str, name: str = "the signing secret") -> bytes:
    """The HMAC key of a secret; raises ValueError (TypeError for a non-string) naming what
    is wrong, as ``secret_problem`` says it."""
    problem = secret_problem(secret)
    if problem:
        error = ValueError if secret is None or isinstance(secret, str) else TypeError
        raise error(f"{name} {problem}")
    raw = (secret[len(SECRET_PREFIX):] if secret.startswith(SECRET_PREFIX) else secret).rstrip("=")
    return base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)


def _keys(secrets: Secrets, who: str) -> list[bytes]:
    """The keys of one secret or a list of them; raises naming the bad one (``secret[1]``)."""
    if secrets is None or isinstance(secrets, (str, bytes, bytearray)) or not isinstance(secrets, Iterable):
        return [_key(secrets, f"{who}the signing secret")]  # type: ignore[arg-type]
    listed = list(secrets)
    if not listed:
        raise ValueError(f"{who}no signing secret (the secret list is empty)")
    return [_key(s, f"{who}secret[{i}]") for i, s in enumerate(listed)]


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of ``msg_id.timestamp.body`` with ``secret``."""
    return _sign_with_key(_key(secret), msg_id, int(timestamp), body)


def _sign_with_key(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def sign_headers(secrets: Secrets, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers for body, signed with every secret given."""
    if isinstance(secrets, str):
        secrets = [secrets]
    return {HEADER_ID: msg_id, HEADER_TIMESTAMP: str(int(timestamp)),
            HEADER_SIGNATURE: " ".join(sign(s, msg_id, timestamp, body) for s in secrets)}


def _header(headers: Mapping[str, str], name: str) -> str:
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return ""


def verify(secrets: Secrets, headers: Mapping[str, str], body: bytes,
           tolerance: float = DEFAULT_TOLERANCE, now: Optional[float] = None) -> str:
    """Checks a request's signature; returns its ``webhook-id``, raises ``SignatureError``.

    ``secrets`` is one secret or several (the receiving side of a rotation: any may match);
    any of the request's signatures may match any of them. The timestamp must be within
    ``tolerance`` seconds of ``now`` (the clock by default). Header names match in any case.
    """
    return _verify(_keys(secrets, ""), headers, body, tolerance, now)


def _verify(keys: list[bytes], headers: Mapping[str, str], body: bytes, tolerance: float,
            now: Optional[float]) -> str:
    msg_id = _header(headers, HEADER_ID)
    ts_text = _header(headers, HEADER_TIMESTAMP)
    sigs = _header(headers, HEADER_SIGNATURE)
    if not msg_id or not ts_text or not sigs:
        raise SignatureError(f"missing {HEADER_ID}, {HEADER_TIMESTAMP} or {HEADER_SIGNATURE} header")
    try:
        ts = int(ts_text)
    except ValueError:
        raise SignatureError(f"bad {HEADER_TIMESTAMP}") from None
    now = time.time() if now is None else now
    if abs(now - ts) > tolerance:
        raise SignatureError(f"timestamp {ts} is outside the tolerance of {tolerance:g}s")
    expected = [_sign_with_key(k, msg_id, ts, body).encode() for k in keys]
    for sig in sigs.split():
        for want in expected:
            if hmac.compare_digest(sig.encode(), want):
                return msg_id
    raise SignatureError("no matching signature")
