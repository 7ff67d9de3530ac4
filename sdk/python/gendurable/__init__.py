"""gendurable for Python: an API client and a step handler, standard library only.

- ``Client``: jobs, batches, signals (by id and by key), steps, cancel, retry, handlers,
  queues, and the asynchronous-step calls; errors raise ``ProblemError``.
- ``Steps``: verifies Standard Webhooks signatures, decodes each step, runs your function
  and encodes its answer; served as WSGI (``steps.wsgi``), ASGI (``steps.asgi``) or an AWS
  Lambda handler (``steps.lambda_handler``).
"""

from .answers import Accepted, Await, Child, Done, Fail, Next, Retry, Spawn, encode, go_duration
from .client import TERMINAL, Client
from .errors import (PROBLEM_CONFLICT, PROBLEM_FORBIDDEN, PROBLEM_LEASE_LOST, PROBLEM_NOT_FOUND,
                     PROBLEM_TOO_LARGE, PROBLEM_UNAUTHORIZED, PROBLEM_VALIDATION, ProblemError,
                     SignatureError)
from .signature import new_secret, secret_problem, sign, sign_headers, verify
from .steps import ChildResult, Job, Lease, Response, Signal, Step, Steps, decode_step

__version__ = "0.1.0"

__all__ = [
    "Accepted", "Await", "Child", "ChildResult", "Client", "Done", "Fail", "Job", "Lease", "Next",
    "PROBLEM_CONFLICT", "PROBLEM_FORBIDDEN", "PROBLEM_LEASE_LOST", "PROBLEM_NOT_FOUND",
    "PROBLEM_TOO_LARGE", "PROBLEM_UNAUTHORIZED", "PROBLEM_VALIDATION", "ProblemError", "Response",
    "Retry", "Signal", "SignatureError", "Spawn", "Step", "Steps", "TERMINAL", "decode_step", "encode",
    "go_duration", "new_secret", "secret_problem", "sign", "sign_headers", "verify",
]
