#!/usr/bin/env python3
"""Run Mooncake's own published store tests against Lunar.

The tests are Mooncake's (mooncake-wheel/tests/test_distributed_object_store.py
and test_replicated_distributed_object_store.py); they are not part of this
repository. Point MOONCAKE_TESTS_DIR at a directory holding a copy (any
revision) and run:

    MOONCAKE_TESTS_DIR=/tmp/mooncake-tests python3 python/tests/mooncake_published/run.py

For each test file found there, a fresh lunar-proxy (embedded master, a
1 GiB segment unless $MOONCAKE_PUBLISHED_SEGMENT, a 1 s read lease) is
started; the file runs under `python3 -m unittest -v` with `mooncake.store`
resolving to python/mooncake-compat and setup() reaching that proxy
through $LUNAR_SOCKET; DEFAULT_KV_LEASE_TTL is set to cover the lease. Each
case's outcome is printed and compared with expected.txt (cases that cannot
pass on a sidecar, and why). Exit status: 0 when every case passed or
failed as expected.txt says, 1 otherwise, 77 when MOONCAKE_TESTS_DIR is
not set or holds none of the files.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import lunar_testproxy  # noqa: E402

FILES = ("test_distributed_object_store.py", "test_replicated_distributed_object_store.py")
LEASE_MS = 1000
PING_MS = 250
# The tests sleep DEFAULT_KV_LEASE_TTL ms before removing what they read,
# expecting the lease to be over. A proxy renews leases it holds a little
# ahead of their end (within two heartbeats and a margin), so a read can
# keep an object leased up to about two TTLs: sleep that long.
SLEEP_MS = 2 * LEASE_MS + 2 * PING_MS + 500
FILE_TIMEOUT = 600


def expected_failures():
    """{"file::Class.test": reason} from expected.txt."""
    out = {}
    with open(os.path.join(HERE, "expected.txt")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                case, _, reason = line.partition(" ")
                out[case] = reason.strip()
    return out


def child(module, out_path):
    """In the test process: run module's tests, record each outcome."""
    import json
    import unittest

    class Recorder(unittest.TextTestResult):
        outcomes = {}

        def _note(self, test, what):
            Recorder.outcomes["%s.%s" % (type(test).__name__, test._testMethodName)] = what

        def addSuccess(self, test):
            super().addSuccess(test)
            self._note(test, "ok")

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._note(test, "FAIL")

        def addError(self, test, err):
            super().addError(test, err)
            if isinstance(test, unittest.TestCase):
                self._note(test, "ERROR")
            else:  # setUpClass or the module import
                Recorder.outcomes[str(test)] = "ERROR"

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            self._note(test, "skipped")

    sys.path.insert(0, os.getcwd())
    suite = unittest.defaultTestLoader.loadTestsFromName(module)
    unittest.TextTestRunner(verbosity=2, resultclass=Recorder).run(suite)
    with open(out_path, "w") as f:
        json.dump(Recorder.outcomes, f)


def run_file(tests_dir, name):
    """{Class.test: outcome} of one test file, and its output."""
    seg = os.environ.get("MOONCAKE_PUBLISHED_SEGMENT", "1GiB")
    old, lunar_testproxy.SEGMENT = lunar_testproxy.SEGMENT, seg
    try:
        proxy = lunar_testproxy.Proxy(["--kv-lease-ttl", "%dms" % LEASE_MS,
                                        "--ping-interval", "%dms" % PING_MS]).start()
    finally:
        lunar_testproxy.SEGMENT = old
    try:
        env = dict(os.environ, LUNAR_SOCKET=proxy.sock,
                   DEFAULT_KV_LEASE_TTL=str(SLEEP_MS),
                   PYTHONPATH=os.pathsep.join([
                       os.path.join(lunar_testproxy.REPO, "python", "mooncake-compat"),
                       os.path.join(lunar_testproxy.REPO, "python"),
                       os.environ.get("PYTHONPATH", "")]))
        out_path = os.path.join(proxy.tmp, "outcomes.json")
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name[:-3],
                                out_path], cwd=tests_dir, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=FILE_TIMEOUT)
            text = p.stdout.decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            text = (e.stdout or b"").decode(errors="replace") + "\nTIMEOUT\n"
        try:
            with open(out_path) as f:
                results = json.load(f)
        except (OSError, ValueError):
            results = {"<run>": "ERROR"}
    finally:
        proxy.stop()
    return results, text


def main():
    tests_dir = os.environ.get("MOONCAKE_TESTS_DIR")
    if not tests_dir:
        print("SKIP: MOONCAKE_TESTS_DIR is not set (a directory with Mooncake's published "
              "store tests)")
        return 77
    names = [n for n in FILES if os.path.isfile(os.path.join(tests_dir, n))]
    if not names:
        print("SKIP: none of %s in %s" % (", ".join(FILES), tests_dir))
        return 77
    expected = expected_failures()
    bad = 0
    for name in names:
        results, text = run_file(tests_dir, name)
        if os.environ.get("MOONCAKE_PUBLISHED_VERBOSE"):
            print(text)
        print("== %s" % name)
        for case in sorted(results):
            outcome = results[case]
            why = expected.get("%s::%s" % (name, case))
            if outcome == "ok" or outcome == "skipped":
                note = "unexpected pass (update expected.txt)" if why else ""
            elif why:
                note = "expected: " + why
            else:
                note = "UNEXPECTED"
                bad += 1
            print("  %-60s %-6s %s" % (case, outcome, note))
        if any(not c.startswith("Test") for c in results):  # import or class setup failed
            print(text[-3000:])
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(main())
