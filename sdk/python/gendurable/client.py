"""The API client, on urllib (no dependency beyond the standard library).

    client = Client("http://localhost:8080")            # token="…" when the server wants one
    client.put_handler("greeter", url="https://…/steps", secret="whsec_…")
    job = client.insert_job("greeter", input={"name": "Ada"})
    job = client.wait_job(job["id"])                      # polls until done, failed or cancelled

Every method answers the decoded JSON of the API (dicts shaped as openapi.yaml says) and
raises ``ProblemError`` for a non-2xx answer. Transport failures raise ``urllib.error.URLError``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterable, Iterator, Optional, Union

from . import answers
from .errors import ProblemError

TERMINAL = ("done", "failed", "cancelled")

_UNSET = object()


def _q(segment: Union[str, int]) -> str:
    return urllib.parse.quote(str(segment), safe="")


def _without_none(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


class Client:
    """A client of one gendurable server. Safe to share between threads (one request per call)."""

    def __init__(self, base_url: str, token: Optional[str] = None, timeout: float = 30.0,
                 user_agent: str = "gendurable-python"):
        """``base_url`` is the server ("http://localhost:8080"); ``token`` is sent as
        ``Authorization: Bearer`` (GENDURABLE_API_TOKEN or an API key); ``timeout`` is
        per request, in seconds."""
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.user_agent = user_agent

    # Transport.

    def request(self, method: str, path: str, body: Any = _UNSET, query: Optional[dict] = None,
                headers: Optional[dict] = None) -> Any:
        """Sends one request and answers its decoded JSON (``None`` for an empty body)."""
        url = self.base_url + path
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        data = None if body is _UNSET else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json, application/problem+json")
        req.add_header("User-Agent", self.user_agent)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            raise ProblemError.from_response(e.code, e.headers.get("Content-Type", ""), raw, e.reason) from None
        return json.loads(raw) if raw else None

    # Jobs.

    def insert_job(self, handler: str, input: Any = None, **options: Any) -> dict:
        """Inserts one job; options are the other fields of ``JobInsert`` (``queue``, ``key``,
        ``priority``, ``run_at``, ``delay``, ``concurrency_key``, ``rate_limit``,
        ``rate_limits`` (a list of ``{"name", "key", "weight"}``), ``debounce``
        (``{"key", "period", "max_wait"}``), ``idempotency_key``, ``max_attempts``,
        ``fairness_key`` (whose work it is, for a queue with ``fairness="round_robin"``), …). A
        key a live job holds answers that job with ``deduplicated: True``; an insert
        collapsed into a pending debounced job answers it with ``debounced: True``."""
        return self.request("POST", "/v1/jobs", _without_none(handler=handler, input=input, **options))

    def insert_jobs(self, jobs: Iterable[dict]) -> list[dict]:
        """Inserts up to 10 000 jobs (dicts shaped as ``JobInsert``) in one request, answered
        in request order; one invalid job refuses the whole batch."""
        return self.request("POST", "/v1/jobs/batch", {"jobs": list(jobs)})["jobs"]

    def get_job(self, job_id: int) -> dict:
        """One job with its inbox and children counts."""
        return self.request("GET", f"/v1/jobs/{_q(job_id)}")

    def list_jobs(self, *, queue: Optional[str] = None, status: Optional[str] = None,
                  handler: Optional[str] = None, key: Optional[str] = None,
                  cursor: Optional[str] = None, limit: Optional[int] = None) -> dict:
        """One page of jobs, newest first: ``{"jobs": [...], "next_cursor": ...}``."""
        return self.request("GET", "/v1/jobs", query=dict(queue=queue, status=status, handler=handler,
                                                         key=key, cursor=cursor, limit=limit))

    def iter_jobs(self, **filters: Any) -> Iterator[dict]:
        """Every job matching the filters of ``list_jobs``, following the cursor."""
        cursor = None
        while True:
            page = self.list_jobs(cursor=cursor, **filters)
            yield from page["jobs"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def list_steps(self, job_id: int, limit: Optional[int] = None) -> list[dict]:
        """The job's attempt history, oldest first."""
        return self.request("GET", f"/v1/jobs/{_q(job_id)}/steps", query={"limit": limit})["steps"]

    def list_signals(self, job_id: int, limit: Optional[int] = None) -> list[dict]:
        """The job's inbox, oldest first (consumed ones flagged)."""
        return self.request("GET", f"/v1/jobs/{_q(job_id)}/signals", query={"limit": limit})["signals"]

    def list_children(self, job_id: int, cursor: Optional[str] = None, limit: Optional[int] = None) -> dict:
        """One page of the job's children, newest first."""
        return self.request("GET", f"/v1/jobs/{_q(job_id)}/children", query={"cursor": cursor, "limit": limit})

    def cancel_job(self, job_id: int) -> dict:
        """Cancels a live job and its live children (an executing one at its outcome)."""
        return self.request("POST", f"/v1/jobs/{_q(job_id)}/cancel")

    def retry_job(self, job_id: int) -> dict:
        """Runs a failed or cancelled job again from where it ended, with fresh attempts."""
        return self.request("POST", f"/v1/jobs/{_q(job_id)}/retry")

    def wait_job(self, job_id: int, statuses: Iterable[str] = TERMINAL, timeout: float = 60.0) -> dict:
        """Polls the job until its status is one of ``statuses`` and answers it; raises
        ``TimeoutError`` after ``timeout`` seconds. Polls start 20 ms apart, backing off to 1 s."""
        wanted = set(statuses)
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            job = self.get_job(job_id)
            if job["status"] in wanted:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is {job['status']}, still not {sorted(wanted)} after {timeout:g}s")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    # Signals.

    def send_signal(self, job_id: int, name: str, payload: Any = None) -> dict:
        """Delivers a signal to a job: ``{"signal_id", "job_id", "woke"}``."""
        return self.request("POST", f"/v1/jobs/{_q(job_id)}/signals", _without_none(name=name, payload=payload))

    def send_signal_by_key(self, key: str, name: str, payload: Any = None) -> dict:
        """Delivers a signal to the live job that holds ``key``."""
        return self.request("POST", "/v1/signals", _without_none(key=key, name=name, payload=payload))

    # Asynchronous steps.

    def heartbeat(self, job_id: int, token: str) -> dict:
        """Extends the lease of an asynchronous step: ``{"lease_expires_at"}``. A token that
        is no longer current raises a ``lease-lost`` ProblemError (409)."""
        return self.request("POST", f"/v1/jobs/{_q(job_id)}/heartbeat", {"token": token})

    def complete_step(self, job_id: int, token: str, outcome: Union[answers.Answer, dict]) -> dict:
        """Reports the outcome of an asynchronous step (``Done(...)``, ``Next(...)``, …)
        fenced by its lease token: ``{"job_id", "status"}``."""
        return self.request("POST", f"/v1/jobs/{_q(job_id)}/outcome", {"token": token, **answers.encode(outcome)})

    # Handlers and queues.

    def put_handler(self, name: str, url: str, *, secret: Optional[str] = None, timeout: answers.Duration = None,
                    max_attempts: Optional[int] = None, backoff_base: answers.Duration = None,
                    backoff_max: answers.Duration = None) -> dict:
        """Registers or changes a webhook handler (a ``whsec_…`` secret is generated when a
        new one has none; it is in the answer)."""
        body = _without_none(url=url, secret=secret, timeout=answers.go_duration(timeout), max_attempts=max_attempts,
                             backoff_base=answers.go_duration(backoff_base),
                             backoff_max=answers.go_duration(backoff_max))
        return self.request("PUT", f"/v1/handlers/{_q(name)}", body)

    def get_handler(self, name: str) -> dict:
        return self.request("GET", f"/v1/handlers/{_q(name)}")

    def list_handlers(self) -> list[dict]:
        return self.request("GET", "/v1/handlers")["handlers"]

    def delete_handler(self, name: str) -> None:
        self.request("DELETE", f"/v1/handlers/{_q(name)}")

    def rotate_handler_secret(self, name: str, secret: Optional[str] = None, overlap: answers.Duration = None) -> dict:
        """Replaces the handler's secret; the old one keeps signing for ``overlap``."""
        return self.request("POST", f"/v1/handlers/{_q(name)}/rotate-secret",
                            _without_none(secret=secret, overlap=answers.go_duration(overlap)))

    def put_queue(self, name: str, *, paused: Optional[bool] = None, max_in_flight: Optional[int] = None,
                  batch: Optional[int] = None, retention: answers.Duration = None,
                  fairness: Optional[str] = None) -> dict:
        """Creates a queue or changes its settings (pause and resume with ``paused``; ``fairness``
        ``"round_robin"`` gives the jobs' fairness keys turns by weight, ``"none"`` turns it off)."""
        body = _without_none(paused=paused, max_in_flight=max_in_flight, batch=batch,
                             retention=answers.go_duration(retention), fairness=fairness)
        return self.request("PUT", f"/v1/queues/{_q(name)}", body)

    def get_queue(self, name: str) -> dict:
        """One queue with its live counts per status."""
        return self.request("GET", f"/v1/queues/{_q(name)}")

    def list_queues(self) -> list[dict]:
        return self.request("GET", "/v1/queues")["queues"]
