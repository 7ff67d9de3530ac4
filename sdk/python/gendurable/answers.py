"""The answers a step gives: next, await, spawn, done, fail, retry (docs/protocol.md).

A step function returns one of these (or a plain dict such as ``{"done": {"result": 1}}``);
the same values are the outcomes of asynchronous steps (``Client.complete_step``).
``state`` left at ``None`` keeps the job's current state. Durations are Go duration
strings (``"500ms"``, ``"30s"``, ``"1h30m"``) or ``datetime.timedelta``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

Duration = Union[str, datetime.timedelta, None]

ANSWER_NAMES = ("next", "await", "spawn", "done", "fail", "retry")


def go_duration(d: Duration) -> Optional[str]:
    """Writes a timedelta as a Go duration string ("1h2m3.5s"); strings pass unchanged."""
    if d is None or isinstance(d, str):
        return d
    micros = round(d.total_seconds() * 1_000_000)
    if micros < 0:
        raise ValueError("a duration cannot be negative")
    if micros % 1000:
        return f"{micros}us"
    if micros < 1_000_000:
        return f"{micros // 1000}ms"
    hours, rest = divmod(micros, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds = f"{rest / 1_000_000:.6f}".rstrip("0").rstrip(".")
    out = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes or hours else "")
    return out + (f"{seconds}s" if rest or not out else "")


def _fields(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


@dataclass
class Next:
    """Runs the next step (after ``delay``) with ``state``."""

    state: Any = None
    delay: Duration = None

    def to_json(self) -> dict[str, Any]:
        return {"next": _fields(state=self.state, delay=go_duration(self.delay))}


@dataclass
class Await:
    """Parks the job until a signal named in ``signals`` (any when ``None``) or ``timeout``."""

    signals: Optional[Sequence[str]] = None
    timeout: Duration = None
    state: Any = None

    def to_json(self) -> dict[str, Any]:
        signals = list(self.signals) if self.signals is not None else None
        return {"await": _fields(signals=signals, timeout=go_duration(self.timeout), state=self.state)}


@dataclass
class Child:
    """A child job to insert with ``Spawn`` (in the parent's queue unless ``queue`` is given)."""

    handler: str
    input: Any = None
    queue: Optional[str] = None
    key: Optional[str] = None
    priority: Optional[int] = None
    delay: Duration = None
    concurrency_key: Optional[str] = None
    max_attempts: Optional[int] = None
    fairness_key: Optional[str] = None  # the parent's unless set

    def to_json(self) -> dict[str, Any]:
        return _fields(handler=self.handler, input=self.input, queue=self.queue, key=self.key,
                       priority=self.priority, delay=go_duration(self.delay),
                       concurrency_key=self.concurrency_key, max_attempts=self.max_attempts,
                       fairness_key=self.fairness_key)


@dataclass
class Spawn:
    """Inserts ``children`` and parks the job until all of them have finished."""

    children: Sequence[Union[Child, dict]] = field(default_factory=list)
    state: Any = None

    def to_json(self) -> dict[str, Any]:
        kids = [c.to_json() if isinstance(c, Child) else dict(c) for c in self.children]
        return {"spawn": _fields(children=kids, state=self.state)}


@dataclass
class Done:
    """Finishes the job with ``result``."""

    result: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"done": _fields(result=self.result)}


@dataclass
class Fail:
    """Fails the job now, without retrying."""

    error: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"fail": _fields(error=self.error)}


@dataclass
class Retry:
    """Runs the same step again after ``delay`` (the handler's backoff when ``None``)."""

    error: Any = None
    delay: Duration = None

    def to_json(self) -> dict[str, Any]:
        return {"retry": _fields(error=self.error, delay=go_duration(self.delay))}


class Accepted:
    """Answers 202: the step goes on asynchronously; finish it with ``Client.complete_step``
    (and keep its lease with ``Client.heartbeat``) using ``step.lease.token``."""


Answer = Union[Next, Await, Spawn, Done, Fail, Retry]


def encode(answer: Union[Answer, dict]) -> dict[str, Any]:
    """The JSON body of an answer; a dict must hold exactly one of the six answers."""
    if hasattr(answer, "to_json"):
        return answer.to_json()
    if isinstance(answer, dict):
        names = [k for k in answer if k in ANSWER_NAMES]
        if len(names) == 1 and len(answer) == 1:
            return dict(answer)
    raise TypeError(f"a step answers one of Next, Await, Spawn, Done, Fail, Retry or Accepted, not {answer!r}")
