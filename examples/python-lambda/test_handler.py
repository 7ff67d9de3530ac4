"""Runs handler.py as Lambda would behind a function URL, against the real server: each
step request the server sends becomes a payload 2.0 event (tests/support.py's bridge).
Run by sdk/python/sdk_test.go with GENDURABLE_URL set and PYTHONPATH holding sdk/python
and sdk/python/tests."""

import importlib
import os
import unittest

import support


class SignupLambdaTest(unittest.TestCase):
    def test_signup_awaits_the_confirmation_signal(self):
        os.environ["GENDURABLE_SECRET"] = support.SECRET
        handler = importlib.import_module("handler")
        c = support.client()
        # The example's handler is named "signup": this suite owns the server it runs on.
        support.register(self, c, "signup", support.lambda_bridge(handler.lambda_handler))

        key = support.unique("signup")
        job = c.insert_job("signup", {"email": "ada@example.com"}, key=key)
        parked = c.wait_job(job["id"], statuses=["awaiting"])
        self.assertEqual(parked["awaiting"], ["email_confirmed"])
        self.assertEqual(parked["state"], {"welcomed": "ada@example.com"})

        self.assertTrue(c.send_signal_by_key(key, "email_confirmed", {"ip": "192.0.2.7"})["woke"])
        done = c.wait_job(job["id"])
        self.assertEqual(done["status"], "done", done)
        self.assertEqual(done["result"], {"email": "ada@example.com", "confirmed_from": "192.0.2.7"})
        self.assertEqual(support.outcomes(c, job["id"]), ["await", "done"])


if __name__ == "__main__":
    unittest.main()
