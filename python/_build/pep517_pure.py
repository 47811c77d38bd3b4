"""A PEP 517 build backend for a pure-Python package, standard library only.

pip builds a wheel through a backend; setuptools needs the `wheel` package
for that (before setuptools 70.1), which a system Python may lack, and
nothing can be fetched offline. This backend writes the wheel itself: the
packages listed in pyproject.toml's [tool.pep517-pure] packages, plus the
dist-info (METADATA, WHEEL, RECORD). Name, version, description,
requires-python and dependencies come from [project]. The same file serves
python/ and python/mooncake-compat/, whose _build/pep517_pure.py is a link
here: pip takes a backend only from inside its project, and a link inside
it counts (tests/test_install.py builds both).
"""

import base64
import hashlib
import os
import re
import zipfile

_TAG = "py3-none-any"


def _pyproject():
    """The few pyproject.toml keys this backend reads (a subset of TOML:
    'key = "string"' and 'key = ["a", "b"]' lines under [section]s)."""
    out, section = {}, ""
    with open("pyproject.toml", encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            m = re.match(r"^\[([^\]]+)\]$", line)
            if m:
                section = m.group(1).strip()
                continue
            m = re.match(r'^([A-Za-z0-9_-]+)\s*=\s*(.+)$', line)
            if not m:
                continue
            key, value = m.group(1), m.group(2).strip()
            if value.startswith("["):
                value = re.findall(r'"([^"]*)"', value)
            else:
                value = value.strip('"')
            out[section + "." + key] = value
    return out


def _metadata(cfg):
    lines = ["Metadata-Version: 2.1", "Name: " + cfg["project.name"],
             "Version: " + cfg["project.version"]]
    if "project.description" in cfg:
        lines.append("Summary: " + cfg["project.description"])
    if "project.requires-python" in cfg:
        lines.append("Requires-Python: " + cfg["project.requires-python"])
    for dep in cfg.get("project.dependencies", []):
        lines.append("Requires-Dist: " + dep)
    return "\n".join(lines) + "\n"


def _files(cfg):
    """(path in the wheel, path on disk) of every .py file of the packages."""
    for pkg in cfg["tool.pep517-pure.packages"]:
        root = pkg.replace(".", "/")
        for name in sorted(os.listdir(root)):
            if name.endswith(".py"):
                yield root + "/" + name, os.path.join(root, name)


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "%s,sha256=%s,%d" % (path, digest.decode(), len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    cfg = _pyproject()
    dist = re.sub(r"[-_.]+", "_", cfg["project.name"])
    info = "%s-%s.dist-info" % (dist, cfg["project.version"])
    wheel_name = "%s-%s-%s.whl" % (dist, cfg["project.version"], _TAG)
    entries = [(arc, open(src, "rb").read()) for arc, src in _files(cfg)]
    entries.append((info + "/METADATA", _metadata(cfg).encode()))
    entries.append((info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: pep517_pure\n"
                                      "Root-Is-Purelib: true\nTag: %s\n" % _TAG).encode()))
    record = [_record_line(arc, data) for arc, data in entries]
    record.append(info + "/RECORD,,")
    entries.append((info + "/RECORD", ("\n".join(record) + "\n").encode()))
    path = os.path.join(wheel_directory, wheel_name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in entries:
            zf.writestr(zipfile.ZipInfo(arc, (1980, 1, 1, 0, 0, 0)), data,
                        zipfile.ZIP_DEFLATED)
    return wheel_name
