"""Standard Webhooks signatures, as the server sends them (webhook/signature.go).

``webhook-signature`` holds one or more space-separated ``v1,<base64 HMAC-SHA256>`` of
``id + "." + timestamp + "." + body``, keyed with the base64-decoded part of a
``whsec_…`` secret; several are sent while a handler's secret rotates.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as _secrets
import time
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


def _key(secret: str) -> bytes:
    raw = secret[len(SECRET_PREFIX):] if secret.startswith(SECRET_PREFIX) else secret
    try:
        key = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if not key:
        raise ValueError("a signing secret is whsec_ followed by base64")
    return key


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
    if isinstance(secrets, str):
        secrets = [secrets]
    keys = [_key(s) for s in secrets]
    if not keys:
        raise ValueError("verify needs at least one secret")
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
