"""The README's greeter as a WSGI and an ASGI application, for gunicorn, uvicorn or any
other WSGI or ASGI server: every job runs three steps, counting in its state, and finishes
with a greeting. The signing secret comes from GENDURABLE_SECRET.

    gunicorn --bind 127.0.0.1:9092 greeter:wsgi
    uvicorn --host 127.0.0.1 --port 9092 greeter:asgi
"""

import os

from gendurable import Done, Next, Steps

steps = Steps(os.environ["GENDURABLE_SECRET"])


@steps.handler("greeter")
def greeter(step):
    if step.job.step < 2:
        return Next(state={"steps": step.job.step + 1})
    return Done(result={"greeting": "hello, " + step.job.input["name"], "steps": step.job.step + 1})


wsgi = steps.wsgi  # gunicorn greeter:wsgi
asgi = steps.asgi  # uvicorn greeter:asgi (sync step functions run in a worker thread)
