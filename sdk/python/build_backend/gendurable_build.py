"""gendurable_build is the SDK's PEP 517 build backend, in the standard library only.

pip builds a package in an isolated environment into which it first installs the
backend's `requires`; setuptools needs setuptools (and, for a wheel, `wheel` on older
versions) from an index, so `pip install /path/to/gendurable/sdk/python` failed offline.
This backend needs nothing (`requires = []`, found through `backend-path`): it writes the
wheel and the sdist itself with zipfile and tarfile, following the specifications
(https://packaging.python.org/en/latest/specifications/binary-distribution-format/,
source-distribution-format/, core-metadata/), and an editable wheel (PEP 660) whose .pth
imports a finder that maps `gendurable` to this folder.

It builds exactly this project: the `gendurable` package, pure Python, one wheel tag
(py3-none-any). The metadata comes from pyproject.toml's [project] table (name, version,
description, readme, requires-python, dependencies). Archive timestamps are fixed
(SOURCE_DATE_EPOCH when set), so two builds of the same tree are byte for byte the same.
"""

import base64
import hashlib
import gzip
import io
import os
import re
import tarfile
import time
import zipfile

__all__ = [
    "build_wheel", "build_sdist", "build_editable",
    "get_requires_for_build_wheel", "get_requires_for_build_sdist", "get_requires_for_build_editable",
    "prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable",
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "gendurable"
TAG = "py3-none-any"
# What an sdist carries besides the package: enough to build the wheel again from it.
SDIST_EXTRA = ["pyproject.toml", "README.md", "build_backend/gendurable_build.py"]


def _project():
    """_project answers pyproject.toml's [project] table."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib  # Python >= 3.11
    except ImportError:
        return _project_table(raw.decode("utf-8"))
    return tomllib.loads(raw.decode("utf-8"))["project"]


def _project_table(text):
    """_project_table reads the [project] table where tomllib is missing (Python < 3.11):
    the `key = "string"` and `key = ["string", ...]` lines this project's table holds."""
    table, inside = {}, False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            inside = line == "[project]"
            continue
        m = re.match(r'^([A-Za-z0-9_-]+)\s*=\s*(.+)$', line)
        if not inside or not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        if value.startswith("["):
            table[key] = re.findall(r'"((?:[^"\\]|\\.)*)"', value)
        elif value.startswith('"'):
            table[key] = re.match(r'^"((?:[^"\\]|\\.)*)"', value).group(1)
    return table


def _names():
    project = _project()
    name = re.sub(r"[-_.]+", "_", project["name"]).lower()
    return project, name, project["version"]


def _metadata():
    """_metadata answers the core metadata (version 2.1) as PKG-INFO and METADATA hold it."""
    project, _, version = _names()
    lines = ["Metadata-Version: 2.1", "Name: " + project["name"], "Version: " + version]
    if project.get("description"):
        lines.append("Summary: " + project["description"])
    if project.get("requires-python"):
        lines.append("Requires-Python: " + project["requires-python"])
    for dep in project.get("dependencies", []):
        lines.append("Requires-Dist: " + dep)
    body = ""
    readme = project.get("readme")
    if isinstance(readme, str):
        lines.append("Description-Content-Type: text/markdown; charset=UTF-8")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _dist_info():
    _, name, version = _names()
    return "%s-%s.dist-info" % (name, version)


def _wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: gendurable_build\nRoot-Is-Purelib: true\nTag: %s\n" % TAG).encode()


def _epoch():
    return int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01, zip's earliest


def _package_files():
    """_package_files answers the package's .py files as (path in the archive, path on disk)."""
    out = []
    src = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                full = os.path.join(dirpath, fn)
                out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


def _write_wheel(directory, files):
    """_write_wheel writes a wheel of files ((archive path, bytes) pairs) plus its
    dist-info (METADATA, WHEEL, RECORD) and answers its file name."""
    _, name, version = _names()
    info = _dist_info()
    files = list(files) + [(info + "/METADATA", _metadata()), (info + "/WHEEL", _wheel_file())]
    record = []
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append(info + "/RECORD,,")
    files.append((info + "/RECORD", ("\n".join(record) + "\n").encode()))
    filename = "%s-%s-%s.whl" % (name, version, TAG)
    stamp = time.gmtime(max(_epoch(), 315532800))[:6]
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            zi = zipfile.ZipInfo(path, date_time=stamp)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = _dist_info()
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for fn, data in (("METADATA", _metadata()), ("WHEEL", _wheel_file())):
        with open(os.path.join(metadata_directory, info, fn), "wb") as f:
            f.write(data)
    return info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(arc, _read(full)) for arc, full in _package_files()])


# The editable wheel's finder: `gendurable` (and only it) imports from this folder, so
# edits show at once and nothing else here (tests/, build_backend/) lands on sys.path.
_FINDER = '''import importlib.util
import sys

PATH = %r


class GendurableEditableFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != %r:
            return None
        return importlib.util.spec_from_file_location(
            name, PATH + "/__init__.py", submodule_search_locations=[PATH])


sys.meta_path.append(GendurableEditableFinder)
'''


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    module = "__editable___%s_finder" % PACKAGE
    finder = _FINDER % (os.path.join(ROOT, PACKAGE), PACKAGE)
    return _write_wheel(wheel_directory, [
        (module + ".py", finder.encode()),
        ("__editable__.%s.pth" % PACKAGE, ("import " + module + "\n").encode()),
    ])


def build_sdist(sdist_directory, config_settings=None):
    _, name, version = _names()
    base = "%s-%s" % (name, version)
    entries = [(arc, _read(full)) for arc, full in _package_files()]
    entries += [(p, _read(os.path.join(ROOT, p))) for p in SDIST_EXTRA]
    entries.append(("PKG-INFO", _metadata()))
    filename = base + ".tar.gz"
    # tarfile's "w:gz" stamps the gzip header with the time of the build; the header's mtime
    # is set here, like every member's, so two builds a second apart are the same bytes.
    with open(os.path.join(sdist_directory, filename), "wb") as raw, \
            gzip.GzipFile(base + ".tar", "wb", fileobj=raw, mtime=_epoch()) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in sorted(entries):
            ti = tarfile.TarInfo(base + "/" + path)
            ti.size, ti.mtime, ti.mode = len(data), _epoch(), 0o644
            tar.addfile(ti, io.BytesIO(data))
    return filename
