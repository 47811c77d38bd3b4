"""Installing python/ and python/mooncake-compat/ with pip, offline and
without build isolation, into a temporary prefix: the packages import from
there and uninstall cleanly. Skipped when this python3 has no pip.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.abspath(os.path.join(HERE, ".."))
COMPAT = os.path.join(PY, "mooncake-compat")


def pip_available():
    return subprocess.run([sys.executable, "-m", "pip", "--version"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


@unittest.skipUnless(pip_available(), "pip is not installed for %s" % sys.executable)
class InstallTest(unittest.TestCase):
    def run_py(self, args, env):
        p = subprocess.run([sys.executable] + args, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout.decode(errors="replace"))
        return p.stdout.decode(errors="replace")

    def test_install_import_uninstall(self):
        prefix = tempfile.mkdtemp(prefix="lunar-pip-")
        self.addCleanup(shutil.rmtree, prefix, True)
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                   PIP_NO_WARN_SCRIPT_LOCATION="1")
        env.pop("PYTHONHOME", None)
        self.run_py(["-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                     "--root-user-action=ignore", "--prefix", prefix, PY, COMPAT], env)
        # Where the prefix's site-packages is depends on the distribution's
        # install scheme (Debian: local/lib/python3.X/dist-packages).
        site = next((d for d, _, files in os.walk(prefix)
                     if "store.py" in files and d.endswith(os.sep + "lunar")), None)
        self.assertIsNotNone(site, "lunar/store.py not installed under %s" % prefix)
        site = os.path.dirname(site)
        env["PYTHONPATH"] = site
        # Import from the prefix, not from this checkout.
        out = self.run_py(["-c", "import lunar, mooncake.store as m; "
                           "print(lunar.__file__); print(m.MooncakeDistributedStore.__name__, "
                           "m.SoftPinAction.ENABLE.name, m.__file__)"],
                          dict(env, PWD="/"))
        self.assertIn(os.path.join(site, "lunar"), out)
        self.assertIn("Store ENABLE " + os.path.join(site, "mooncake"), out)
        # Debian marks its Python externally managed (PEP 668), which blocks
        # uninstall even of what sits in our prefix (first on PYTHONPATH).
        self.run_py(["-m", "pip", "uninstall", "-y", "--root-user-action=ignore",
                     "mooncake-compat-lunar", "lunar"], dict(env, PIP_BREAK_SYSTEM_PACKAGES="1"))
        self.assertFalse(os.path.exists(os.path.join(site, "lunar")))
        self.assertFalse(os.path.exists(os.path.join(site, "mooncake")))

    def test_build_backends_are_one_file(self):
        self.assertTrue(os.path.samefile(os.path.join(PY, "_build", "pep517_pure.py"),
                                         os.path.join(COMPAT, "_build", "pep517_pure.py")))


if __name__ == "__main__":
    unittest.main()
