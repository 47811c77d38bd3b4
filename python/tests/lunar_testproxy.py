"""The proxy the Mooncake-compatibility tests talk to, and the paths they use.

When $LUNAR_TEST_SOCKET names a running proxy (python/tests/run.sh starts
one), the tests use it; otherwise the first caller of socket_path() starts
"$BUILD/bin/lunar-proxy --embedded-master" on a socket in a temporary
directory, stopped at exit (and killed with this process on Linux). Puts
python/ and python/mooncake-compat/ on sys.path, so `import lunar` and
`from mooncake.store import ...` resolve to this checkout.
"""

import atexit
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.path.join(REPO, os.environ.get("BUILD", "build"))
PROXY = os.path.join(BUILD, "bin", "lunar-proxy")
os.environ.setdefault("LUNAR_LIB", os.path.join(BUILD, "lib", "liblunar.so"))
for _p in (os.path.join(REPO, "python", "mooncake-compat"), os.path.join(REPO, "python")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import lunar  # noqa: E402

READY_TIMEOUT = 10.0
STOP_GRACE = 5.0
SEGMENT = "256MiB"

_proxy = None


def _die_with_parent():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass


class Proxy:
    """One lunar-proxy child with its log in a temporary directory."""

    def __init__(self, extra=()):
        self.tmp = tempfile.mkdtemp(prefix="lunar-pyc-")
        self.sock = os.path.join(self.tmp, "proxy.sock")
        self.log_path = os.path.join(self.tmp, "proxy.log")
        self.extra = list(extra)
        self.proc = None

    def start(self):
        if not os.access(PROXY, os.X_OK):
            raise RuntimeError("%s is missing; build first (make BUILD=...)" % PROXY)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [PROXY, "--embedded-master", "--data-port", "0", "--http-port", "0",
                 "--segment-size", SEGMENT, "--socket", self.sock] + self.extra,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("lunar-proxy exited (%s):\n%s" % (self.proc.returncode,
                                                                    self.log()))
            if os.path.exists(self.sock):
                s = lunar.Store()
                try:
                    if s.setup(socket_path=self.sock) == 0 and s.health_check() == 0:
                        return self
                finally:
                    s.close()
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("lunar-proxy not ready within %.0f s:\n%s" % (READY_TIMEOUT,
                                                                          self.log()))

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_GRACE)
        shutil.rmtree(self.tmp, True)

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-4096:].decode(errors="replace")
        except OSError:
            return ""


def _wait_ready(sock):
    """Wait until the proxy at sock answers a health check."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        s = lunar.Store()
        try:
            if s.setup(socket_path=sock) == 0 and s.health_check() == 0:
                return
        finally:
            s.close()
        if time.monotonic() > deadline:
            raise RuntimeError("no ready lunar-proxy at %s" % sock)
        time.sleep(0.05)


def socket_path():
    """The proxy socket for these tests; also exported as $LUNAR_SOCKET so
    setup() with Mooncake's arguments only (no socket_path) finds it."""
    global _proxy
    sock = os.environ.get("LUNAR_TEST_SOCKET")
    if sock:
        _wait_ready(sock)
    else:
        if _proxy is None:
            _proxy = Proxy().start()
            atexit.register(_proxy.stop)
        sock = _proxy.sock
    os.environ["LUNAR_SOCKET"] = sock
    return sock
