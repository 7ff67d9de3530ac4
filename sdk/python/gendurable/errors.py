"""The errors the SDK raises."""

from __future__ import annotations

import json
from typing import Any

PROBLEM_VALIDATION = "urn:gendurable:problem:validation"
PROBLEM_NOT_FOUND = "urn:gendurable:problem:not-found"
PROBLEM_CONFLICT = "urn:gendurable:problem:conflict"
PROBLEM_LEASE_LOST = "urn:gendurable:problem:lease-lost"
PROBLEM_TOO_LARGE = "urn:gendurable:problem:too-large"
PROBLEM_FORBIDDEN = "urn:gendurable:problem:forbidden"
PROBLEM_UNAUTHORIZED = "urn:gendurable:problem:unauthorized"


class ProblemError(Exception):
    """A non-2xx answer of the API, carrying its RFC 9457 problem details.

    ``type``, ``title``, ``status``, ``detail`` and ``errors`` (a list of
    ``{"field", "message"}``) are the problem's members; ``problem`` is the whole
    document. An answer that is not a problem document (a proxy's error page) gets
    ``type`` ``"about:blank"`` and its body as ``detail``.
    """

    def __init__(self, status: int, problem: dict[str, Any], body: bytes = b""):
        self.status = int(problem.get("status") or status)
        self.type = str(problem.get("type") or "about:blank")
        self.title = str(problem.get("title") or "")
        self.detail = problem.get("detail")
        self.errors = list(problem.get("errors") or [])
        self.problem = problem
        self.body = body
        super().__init__(self._message())

    @classmethod
    def from_response(cls, status: int, content_type: str, body: bytes, reason: str = "") -> "ProblemError":
        """Builds the error of one answer from its status, content type and body."""
        if content_type.split(";")[0].strip().lower() == "application/problem+json":
            try:
                doc = json.loads(body)
                if isinstance(doc, dict):
                    return cls(status, doc, body)
            except ValueError:
                pass
        text = body.decode("utf-8", "replace").strip()
        return cls(status, {"type": "about:blank", "title": reason, "status": status, "detail": text or None}, body)

    @property
    def field_errors(self) -> dict[str, str]:
        """Maps each field the server named (e.g. ``jobs/3/priority``) to its message."""
        return {e.get("field", ""): e.get("message", "") for e in self.errors}

    def _message(self) -> str:
        msg = f"{self.status} {self.title}".rstrip()
        if self.detail:
            msg += f": {self.detail}"
        elif self.errors:
            msg += " (" + "; ".join(f"{f}: {m}" for f, m in self.field_errors.items()) + ")"
        return msg


class SignatureError(Exception):
    """A step request whose Standard Webhooks signature or timestamp does not verify."""
