"""Mooncake's published store tests (not in this repository), run by
python/tests/mooncake_published/run.py when $MOONCAKE_TESTS_DIR names a
directory holding a copy; skipped otherwise."""

import os
import subprocess
import sys
import unittest

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mooncake_published", "run.py")


@unittest.skipUnless(os.environ.get("MOONCAKE_TESTS_DIR"),
                     "MOONCAKE_TESTS_DIR is not set (a copy of Mooncake's mooncake-wheel/tests)")
class PublishedTest(unittest.TestCase):
    def test_mooncake_published_store_tests(self):
        p = subprocess.run([sys.executable, RUNNER], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=1500)
        out = p.stdout.decode(errors="replace")
        if p.returncode == 77:
            self.skipTest(out.strip())
        self.assertEqual(p.returncode, 0, out)


if __name__ == "__main__":
    unittest.main()
