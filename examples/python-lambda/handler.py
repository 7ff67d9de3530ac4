"""An AWS Lambda step handler for gendurable: a sign-up that waits for the e-mail address
to be confirmed.

Step 0 (a fresh job) records the welcome and parks the job until an ``email_confirmed``
signal arrives, for up to 72 hours; the step it wakes to finishes the job, or fails it
when the wait timed out. Deploy it behind a function URL (auth type NONE: every request
is verified against the handler's signing secret instead) with GENDURABLE_SECRET set to
that secret, then register the URL:

    curl -X PUT $GENDURABLE/v1/handlers/signup -H 'Content-Type: application/json' \
      -d '{"url": "https://<id>.lambda-url.<region>.on.aws/", "secret": "'$GENDURABLE_SECRET'"}'
"""

import os

from gendurable import Await, Done, Fail, Steps

steps = Steps(os.environ["GENDURABLE_SECRET"])


@steps.handler("signup", step=0)
def welcome(step):
    # A real handler would send the welcome e-mail here, idempotently (step.webhook_id).
    return Await(signals=["email_confirmed"], timeout="72h", state={"welcomed": step.job.input["email"]})


@steps.handler("signup")
def confirmed(step):
    if step.wake == "timeout":
        return Fail(error={"message": "the address was not confirmed within 72h"})
    signal = step.signal("email_confirmed")
    if signal is None:  # woken by something else: keep waiting
        return Await(signals=["email_confirmed"], timeout="72h")
    return Done(result={"email": step.job.state["welcomed"], "confirmed_from": signal.payload.get("ip")})


lambda_handler = steps.lambda_handler
