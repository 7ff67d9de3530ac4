"""End to end: the real server POSTs steps to Python handlers served over real HTTP."""

from __future__ import annotations

import queue
import threading
import unittest

import gendurable
from gendurable import Accepted, Await, Child, Done, Fail, Next, ProblemError, Retry, Spawn, Steps

import support


def greeter(step: gendurable.Step):
    """The README quickstart's handler: two steps that count in the state, then done."""
    if step.job.step < 2:
        return Next(state={"steps": step.job.step + 1})
    return Done(result={"greeting": "hello, " + step.job.input["name"], "state": step.job.state})


class QuickstartTest(unittest.TestCase):
    def test_quickstart_over_wsgi(self):
        c = support.client()
        steps = Steps(support.SECRET)
        name = support.unique("greeter")
        steps.register(name, greeter)
        support.register(self, c, name, steps.wsgi)

        job = c.insert_job(name, {"name": "Ada"})
        self.assertEqual(job["status"], "runnable")
        self.assertFalse(job["deduplicated"])
        done = c.wait_job(job["id"])
        self.assertEqual(done["status"], "done", done)
        self.assertEqual(done["step"], 3)
        self.assertEqual(done["result"], {"greeting": "hello, Ada", "state": {"steps": 2}})
        self.assertEqual(support.outcomes(c, job["id"]), ["next", "next", "done"])

    def test_async_def_step_function_over_asgi(self):
        c = support.client()
        steps = Steps(support.SECRET)
        name = support.unique("greeter-asgi")

        @steps.handler(name)
        async def run(step):
            return greeter(step)

        support.register(self, c, name, support.asgi_bridge(steps.asgi))
        job = c.insert_job(name, {"name": "Grace"})
        done = c.wait_job(job["id"])
        self.assertEqual((done["status"], done["result"]["greeting"]), ("done", "hello, Grace"), done)

    def test_quickstart_over_lambda_function_url_events(self):
        for base64_body in (False, True):
            with self.subTest(base64_body=base64_body):
                c = support.client()
                steps = Steps(support.SECRET)
                name = support.unique("greeter-lambda")
                steps.register(name, greeter)
                support.register(self, c, name, support.lambda_bridge(steps.lambda_handler, base64_body))
                job = c.insert_job(name, {"name": "Lin"})
                done = c.wait_job(job["id"])
                self.assertEqual((done["status"], done["step"]), ("done", 3), done)


class ApprovalFlowTest(unittest.TestCase):
    """docs/protocol.md's approval flow: spawn a notify child, await a signal, done."""

    def test_spawn_await_signal_done(self):
        c = support.client()
        steps = Steps(support.SECRET)
        expense, notify = support.unique("expense"), support.unique("notify")
        notified = []

        @steps.handler(notify)
        def send_note(step):
            notified.append(step.job.input)
            return Done(result={"sent": True})

        @steps.handler(expense, step=0)
        def ask(step):
            return Spawn(children=[Child(notify, input={"to": step.job.input["approver"]})], state={"asked": True})

        @steps.handler(expense)
        def decide(step):
            if step.wake == "children":
                if [ch.status for ch in step.children] != ["done"]:
                    return Fail(error={"message": "could not notify the approver"})
                return Await(signals=["approved", "rejected"], timeout="1h", state=step.job.state)
            if step.wake == "timeout":
                return Fail(error={"message": "no decision"})
            decision = step.signal("approved", "rejected")
            if decision is None:
                return Await(signals=["approved", "rejected"])
            return Done(result={"decision": decision.name, "by": decision.payload["by"], "state": step.job.state})

        support.register(self, c, expense, steps.wsgi)
        support.register(self, c, notify, steps.wsgi)

        key = support.unique("expense-key")
        job = c.insert_job(expense, {"amount": 420, "approver": "ana@example.com"}, key=key)
        again = c.insert_job(expense, {"amount": 999}, key=key)
        self.assertTrue(again["deduplicated"])
        self.assertEqual(again["id"], job["id"])

        # "awaiting" is also the status of a parent waiting for its children: wait for the signals.
        parked = support.wait_for(lambda: (j := c.get_job(job["id"])).get("awaiting") and j, what="the await")
        self.assertEqual((parked["status"], parked["awaiting"]), ("awaiting", ["approved", "rejected"]))
        self.assertEqual(parked["children_finished"], 1)
        self.assertEqual(notified, [{"to": "ana@example.com"}])
        children = c.list_children(job["id"])["jobs"]
        self.assertEqual([(ch["handler"], ch["status"]) for ch in children], [(notify, "done")])

        sent = c.send_signal_by_key(key, "approved", {"by": "ana"})
        self.assertTrue(sent["woke"])
        self.assertEqual(sent["job_id"], job["id"])
        done = c.wait_job(job["id"])
        self.assertEqual(done["status"], "done", done)
        self.assertEqual(done["result"], {"decision": "approved", "by": "ana", "state": {"asked": True}})
        self.assertEqual(support.outcomes(c, job["id"]), ["spawn", "await", "done"])
        self.assertTrue(all(s["consumed"] for s in c.list_signals(job["id"])))

        with self.assertRaises(ProblemError) as cm:
            c.send_signal(job["id"], "approved")
        self.assertEqual((cm.exception.status, cm.exception.type), (409, gendurable.PROBLEM_CONFLICT))


class AnswersTest(unittest.TestCase):
    def test_retry_fail_and_exception(self):
        c = support.client()
        steps = Steps(support.SECRET)
        flaky, doomed, broken = support.unique("flaky"), support.unique("doomed"), support.unique("broken")

        @steps.handler(flaky)
        def retry_once(step):
            if step.job.attempt == 1:
                return Retry(error={"message": "busy"}, delay="10ms")
            return Done(result={"attempt": step.job.attempt})

        @steps.handler(doomed)
        def give_up(step):
            return Fail(error={"message": "card declined"})

        @steps.handler(broken)
        def crash(step):
            if step.job.attempt == 1:
                raise RuntimeError("database is down")
            return Done()

        for name in (flaky, doomed, broken):
            support.register(self, c, name, steps.wsgi)
        a, b, d = c.insert_job(flaky), c.insert_job(doomed), c.insert_job(broken)

        done = c.wait_job(a["id"])
        self.assertEqual((done["status"], done["result"]), ("done", {"attempt": 2}))
        self.assertEqual(support.outcomes(c, a["id"]), ["retry", "done"])

        failed = c.wait_job(b["id"])
        self.assertEqual((failed["status"], failed["error"]), ("failed", {"message": "card declined"}))

        recovered = c.wait_job(d["id"])
        self.assertEqual(recovered["status"], "done")
        history = c.list_steps(d["id"])
        self.assertEqual([(s["outcome"], s["http_status"]) for s in history], [("http_error", 500), ("done", 200)])
        self.assertIn("database is down", str(history[0]["error"]))


class SignatureRejectionTest(unittest.TestCase):
    def test_wrong_secret_is_refused_until_a_rotation_signs_with_the_right_one(self):
        c = support.client()
        steps = Steps(support.SECRET)
        name = support.unique("rotated")
        steps.register(name, lambda step: Done(result={"ok": True}))
        # The server signs with a secret the handler does not know: every attempt is a 401.
        support.register(self, c, name, steps.wsgi, secret=support.OTHER_SECRET)
        job = c.insert_job(name)
        support.wait_for(lambda: len(c.list_steps(job["id"])) >= 2, what="two refused attempts")
        self.assertEqual(c.get_job(job["id"])["status"] in ("runnable", "executing"), True)
        refused = c.list_steps(job["id"])[:2]
        self.assertEqual([(s["outcome"], s["http_status"]) for s in refused], [("http_error", 401)] * 2)

        # Rotating to the handler's secret sends both signatures during the overlap: accepted.
        rotated = c.rotate_handler_secret(name, secret=support.SECRET, overlap="1h")
        self.assertEqual(rotated["secret"], support.SECRET)
        self.assertIsNotNone(rotated["previous_secret_expires_at"])
        done = c.wait_job(job["id"])
        self.assertEqual((done["status"], done["result"]), ("done", {"ok": True}))


class AsynchronousStepTest(unittest.TestCase):
    def test_accepted_then_heartbeat_and_outcome_with_the_lease_token(self):
        c = support.client()
        steps = Steps(support.SECRET)
        name = support.unique("report")
        received: "queue.Queue[gendurable.Step]" = queue.Queue()

        @steps.handler(name)
        def start_report(step):
            received.put(step)
            return Accepted()

        support.register(self, c, name, steps.wsgi)
        job = c.insert_job(name, {"rows": 3})
        step = received.get(timeout=60)
        self.assertEqual(c.get_job(job["id"])["status"], "executing")

        # The work goes on elsewhere (a thread here): heartbeat, then report the outcome.
        answer: dict = {}

        def work():
            answer["heartbeat"] = c.heartbeat(step.job.id, step.lease.token)
            answer["outcome"] = c.complete_step(step.job.id, step.lease.token, Done(result={"rows": step.job.input["rows"]}))

        worker = threading.Thread(target=work)
        worker.start()
        worker.join(60)
        self.assertIn("lease_expires_at", answer["heartbeat"])
        self.assertEqual(answer["outcome"], {"job_id": job["id"], "status": "done"})
        self.assertEqual(c.get_job(job["id"])["result"], {"rows": 3})

        with self.assertRaises(ProblemError) as cm:
            c.complete_step(step.job.id, step.lease.token, Done())
        self.assertEqual((cm.exception.status, cm.exception.type), (409, gendurable.PROBLEM_LEASE_LOST))
        with self.assertRaises(ProblemError) as cm:
            c.heartbeat(step.job.id, step.lease.token)
        self.assertEqual(cm.exception.status, 409)


if __name__ == "__main__":
    unittest.main()
