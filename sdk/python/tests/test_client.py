"""The client against the real server: every call, and the problems bad input answers."""

from __future__ import annotations

import unittest
import urllib.request

import gendurable
from gendurable import ProblemError

import support


class ProblemsTest(unittest.TestCase):
    def setUp(self):
        self.c = support.client()

    def assertProblem(self, call, status, problem_type, field=None):
        with self.assertRaises(ProblemError) as cm:
            call()
        e = cm.exception
        self.assertEqual((e.status, e.type), (status, problem_type), e.problem)
        self.assertTrue(e.title)
        if field is not None:
            self.assertIn(field, e.field_errors, e.problem)
            self.assertIn(field, str(e))
        return e

    def test_bad_input_names_the_field_and_writes_nothing(self):
        handler = support.unique("nothing-written")
        self.assertProblem(lambda: self.c.insert_job(handler, priority=12), 422, gendurable.PROBLEM_VALIDATION,
                           "priority")
        self.assertProblem(lambda: self.c.insert_job(handler, delay="soon"), 422, gendurable.PROBLEM_VALIDATION,
                           "delay")
        self.assertProblem(lambda: self.c.insert_job(handler, colour="red"), 422, gendurable.PROBLEM_VALIDATION)
        self.assertProblem(lambda: self.c.insert_jobs([{"handler": handler}, {"handler": handler, "priority": -1}]),
                           422, gendurable.PROBLEM_VALIDATION, "jobs/1/priority")
        self.assertProblem(lambda: self.c.put_handler(support.unique("h"), url="ftp://x"), 422,
                           gendurable.PROBLEM_VALIDATION)
        self.assertEqual(self.c.list_jobs(handler=handler)["jobs"], [])

    def test_missing_things_are_not_found(self):
        self.assertProblem(lambda: self.c.get_job(987654321), 404, gendurable.PROBLEM_NOT_FOUND)
        self.assertProblem(lambda: self.c.send_signal(987654321, "x"), 404, gendurable.PROBLEM_NOT_FOUND)
        self.assertProblem(lambda: self.c.send_signal_by_key(support.unique("nobody"), "x"), 404,
                           gendurable.PROBLEM_NOT_FOUND)
        self.assertProblem(lambda: self.c.get_handler(support.unique("nobody")), 404, gendurable.PROBLEM_NOT_FOUND)

    def test_malformed_json_is_a_bad_request_problem(self):
        req = urllib.request.Request(support.server_url() + "/v1/jobs", data=b'{"handler": ', method="POST",
                                     headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(req, timeout=30)
        e = ProblemError.from_response(cm.exception.code, cm.exception.headers["Content-Type"], cm.exception.read())
        self.assertEqual(e.status, 400)
        self.assertTrue(e.type.startswith("urn:gendurable:problem:"))

    def test_an_answer_that_is_not_a_problem_document(self):
        e = ProblemError.from_response(502, "text/html", b"<h1>Bad Gateway</h1>", "Bad Gateway")
        self.assertEqual((e.status, e.type, e.title, e.detail), (502, "about:blank", "Bad Gateway", "<h1>Bad Gateway</h1>"))
        self.assertEqual(str(e), "502 Bad Gateway: <h1>Bad Gateway</h1>")


class CallsTest(unittest.TestCase):
    def setUp(self):
        self.c = support.client()

    def parked(self, prefix: str) -> tuple[str, str]:
        """A registered handler and a paused queue: jobs inserted there stay runnable."""
        handler, q = support.unique(prefix), support.unique(prefix + "-q")
        self.c.put_handler(handler, url="http://127.0.0.1:9/steps")
        self.c.put_queue(q, paused=True)
        return handler, q

    def test_handlers(self):
        name = support.unique("registry")
        created = self.c.put_handler(name, url="http://127.0.0.1:9/steps", timeout="5s", max_attempts=3)
        self.assertTrue(created["secret"].startswith("whsec_"))
        self.assertEqual((created["timeout"], created["max_attempts"]), ("5s", 3))
        self.assertEqual(self.c.get_handler(name)["url"], "http://127.0.0.1:9/steps")
        self.assertIn(name, [h["name"] for h in self.c.list_handlers()])
        self.c.delete_handler(name)
        with self.assertRaises(ProblemError):
            self.c.get_handler(name)

    def test_queue_pause_cancel_retry_and_listing(self):
        handler, q = self.parked("never-runs")
        self.assertTrue(self.c.get_queue(q)["paused"])
        batch = self.c.insert_jobs([{"handler": handler, "queue": q, "input": {"n": n}} for n in range(5)])
        self.assertEqual([j["input"] for j in batch], [{"n": n} for n in range(5)])
        self.assertEqual(self.c.get_queue(q)["counts"]["runnable"], 5)
        self.assertIn(q, [x["name"] for x in self.c.list_queues()])

        first = self.c.list_jobs(queue=q, limit=2)
        self.assertEqual(len(first["jobs"]), 2)
        self.assertIsNotNone(first["next_cursor"])
        everything = list(self.c.iter_jobs(queue=q, limit=2))
        self.assertEqual([j["id"] for j in everything], sorted((j["id"] for j in batch), reverse=True))

        victim = batch[0]["id"]
        self.assertEqual(self.c.cancel_job(victim)["status"], "cancelled")
        with self.assertRaises(ProblemError) as cm:
            self.c.cancel_job(victim)
        self.assertEqual(cm.exception.status, 409)
        self.assertEqual(self.c.retry_job(victim)["status"], "runnable")
        self.assertEqual(self.c.list_jobs(queue=q, status="cancelled")["jobs"], [])

    def test_a_fair_queue_keeps_each_jobs_fairness_key(self):
        handler, q = self.parked("fair")
        self.assertEqual(self.c.get_queue(q)["fairness"], "none")
        self.assertEqual(self.c.put_queue(q, fairness="round_robin")["fairness"], "round_robin")
        one = self.c.insert_job(handler, queue=q, fairness_key="acme")
        many = self.c.insert_jobs([{"handler": handler, "queue": q, "fairness_key": "globex"}])
        self.assertEqual(self.c.get_job(one["id"])["fairness_key"], "acme")
        self.assertEqual(self.c.get_job(many[0]["id"])["fairness_key"], "globex")

    def test_signals_wait_in_the_inbox(self):
        handler, q = self.parked("inboxed")
        job = self.c.insert_job(handler, queue=q, key=support.unique("k"))
        a = self.c.send_signal(job["id"], "first", {"n": 1})
        b = self.c.send_signal_by_key(job["key"], "second")
        self.assertFalse(a["woke"] or b["woke"])
        inbox = self.c.list_signals(job["id"])
        self.assertEqual([(s["name"], s["payload"], s["consumed"]) for s in inbox],
                         [("first", {"n": 1}, False), ("second", None, False)])
        self.assertEqual(self.c.get_job(job["id"])["signals_pending"], 2)


if __name__ == "__main__":
    unittest.main()
