"""The in-tree build backend (build_backend/gendurable_build.py), without pip: the wheel's
RECORD matches its files, builds are reproducible, and the pyproject reader used below
Python 3.11 reads what tomllib reads."""

import base64
import hashlib
import os
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "build_backend"))

import gendurable_build as backend  # noqa: E402


class BuildBackendTest(unittest.TestCase):
    def test_wheel_record_matches_its_files(self):
        with tempfile.TemporaryDirectory() as d:
            name = backend.build_wheel(d)
            self.assertEqual(name, "gendurable-0.1.0-py3-none-any.whl")
            with zipfile.ZipFile(os.path.join(d, name)) as z:
                names = set(z.namelist())
                self.assertIn("gendurable/__init__.py", names)
                self.assertFalse([n for n in names if n.startswith(("tests/", "build_backend/"))])
                meta = z.read("gendurable-0.1.0.dist-info/METADATA").decode()
                self.assertIn("Name: gendurable\nVersion: 0.1.0\n", meta)
                self.assertIn("Requires-Python: >=3.9", meta)
                record = z.read("gendurable-0.1.0.dist-info/RECORD").decode().splitlines()
                listed = set()
                for line in record:
                    path, digest, size = line.rsplit(",", 2)
                    listed.add(path)
                    if path.endswith("/RECORD"):
                        self.assertEqual((digest, size), ("", ""))
                        continue
                    data = z.read(path)
                    want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    self.assertEqual((digest, int(size)), ("sha256=" + want, len(data)), path)
                self.assertEqual(listed, names)

    def test_builds_are_reproducible(self):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            for build in (backend.build_wheel, backend.build_sdist):
                x, y = build(a), build(b)
                with open(os.path.join(a, x), "rb") as f1, open(os.path.join(b, y), "rb") as f2:
                    self.assertEqual(f1.read(), f2.read(), x)

    def test_the_sdists_gzip_header_carries_the_source_date_not_the_clock(self):
        # Two builds within one second match whatever the header holds; the header itself
        # must carry the build's fixed date, or builds a second apart differ.
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, backend.build_sdist(d)), "rb") as f:
                header = f.read(10)
            self.assertEqual(header[:2], b"\x1f\x8b")
            self.assertEqual(int.from_bytes(header[4:8], "little"), backend._epoch())

    def test_fallback_reader_reads_what_tomllib_reads(self):
        with open(os.path.join(backend.ROOT, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        table = backend._project_table(text)
        try:
            import tomllib
        except ImportError:  # Python < 3.11: what this pyproject.toml says
            self.assertEqual((table["name"], table["requires-python"], table["dependencies"]),
                             ("gendurable", ">=3.9", []))
            return
        self.assertEqual(table, tomllib.loads(text)["project"])


if __name__ == "__main__":
    unittest.main()
