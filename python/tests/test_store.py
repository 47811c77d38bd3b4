"""lunar.Store against a real lunar-proxy with an embedded master.

Starts "$BUILD/bin/lunar-proxy --embedded-master" (BUILD defaults to
build/, relative to the repository) on a socket in a temporary directory,
uses liblunar from $LUNAR_LIB or $BUILD/lib, and always stops the proxy.
Run: BUILD=build python3 -m unittest discover -s python/tests -v
"""

import array
import ctypes
import fcntl
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.path.join(REPO, os.environ.get("BUILD", "build"))
PROXY = os.path.join(BUILD, "bin", "lunar-proxy")
os.environ.setdefault("LUNAR_LIB", os.path.join(BUILD, "lib", "liblunar.so"))
sys.path.insert(0, os.path.join(REPO, "python"))

import lunar  # noqa: E402

READY_TIMEOUT = 10.0
STOP_GRACE = 5.0


def die_with_parent():
    """In the proxy child: SIGKILL when the test process dies, so a killed
    test run leaves no proxy behind (Linux PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def pattern(key, n):
    """n deterministic bytes that depend on key."""
    seed = (sum(key.encode()) * 2654435761) & 0xFF
    return bytes((seed + i * 7) & 0xFF for i in range(n))


class Proxy:
    """One lunar-proxy child with its log in the temporary directory."""

    def __init__(self, tmp):
        self.sock = os.path.join(tmp, "proxy.sock")
        self.log_path = os.path.join(tmp, "proxy.log")
        self.proc = None

    def start(self):
        if not os.access(PROXY, os.X_OK):
            raise RuntimeError("%s is missing; build first (make BUILD=...)" % PROXY)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [PROXY, "--embedded-master", "--data-port", "0", "--http-port", "0", "--segment-size", "64MiB",
                 "--socket", self.sock],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("lunar-proxy exited (%s) during start-up:\n%s"
                                   % (self.proc.returncode, self.log()))
            if os.path.exists(self.sock):
                s = lunar.Store()
                try:
                    if s.setup(socket_path=self.sock) == 0 and s.health_check() == 0:
                        return
                finally:
                    s.close()
            time.sleep(0.05)
        raise RuntimeError("lunar-proxy not ready within %.0f s:\n%s"
                           % (READY_TIMEOUT, self.log()))

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_GRACE)

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-4096:].decode(errors="replace")
        except OSError:
            return ""


class StoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="lunar-py-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.proxy = Proxy(cls.tmp)
        cls.addClassCleanup(cls.proxy.stop)
        cls.proxy.start()
        cls.store = lunar.Store()
        cls.addClassCleanup(cls.store.close)
        rc = cls.store.setup("10.0.0.1:12345", "P2PHANDSHAKE", 1 << 30, 1 << 28, "rdma",
                             "mlx5_0", "10.0.0.2:50051", socket_path=cls.proxy.sock)
        if rc != 0:
            raise RuntimeError("setup = %d:\n%s" % (rc, cls.proxy.log()))

    def setUp(self):
        self.s = self.store

    def fail_with_log(self, msg):
        self.fail("%s\n--- proxy log ---\n%s" % (msg, self.proxy.log()))

    # --- lifecycle ---------------------------------------------------------

    def test_setup_health_and_hostname(self):
        self.assertEqual(self.s.health_check(), 0)
        self.assertEqual(self.s.setup(socket_path=self.proxy.sock), 0)  # already set up
        # setup() was given "10.0.0.1:12345": get_hostname reports it, port included.
        self.assertEqual(self.s.get_hostname(), "10.0.0.1:12345")

    def test_no_proxy_and_not_set_up(self):
        s = lunar.Store()
        self.assertEqual(s.health_check(), 1)
        self.assertEqual(s.put("py/unset", b"x"), lunar.NOT_SET_UP)
        self.assertEqual(s.get("py/unset"), b"")
        self.assertEqual(s.is_exist("py/unset"), lunar.NOT_SET_UP)
        self.assertEqual(s.batch_is_exist(["a", "b"]), [lunar.NOT_SET_UP] * 2)
        rc = s.setup(socket_path=os.path.join(self.tmp, "nobody.sock"))
        self.assertEqual(rc, lunar.PROXY_UNAVAILABLE)
        self.assertEqual(lunar.strerror(rc), "PROXY_UNAVAILABLE")
        s.close()
        s.close()  # twice is fine

    def test_context_manager_and_tenant(self):
        self.assertEqual(self.s.put("py/tenant", b"default's"), 0)
        with lunar.Store() as t:
            self.assertEqual(t.setup(socket_path=self.proxy.sock, tenant="other"), 0)
            self.assertEqual(t.is_exist("py/tenant"), 0)
            self.assertEqual(t.put("py/tenant", b"other's"), 0)
            self.assertEqual(t.get("py/tenant"), b"other's")
        self.assertEqual(self.s.get("py/tenant"), b"default's")

    # --- single keys -------------------------------------------------------

    def test_put_larger_than_every_segment_says_why(self):
        # Mooncake's code (-200, back-pressure to engines); the words say
        # that no eviction can help: the only segment holds 64 MiB.
        self.assertEqual(self.s.put("py/too-big", bytes(65 << 20)), lunar.NO_AVAILABLE_HANDLE)
        self.assertIn("larger than every segment", lunar.error_detail())
        self.assertIn("the largest holds 67108864 bytes", lunar.error_detail())
        self.assertEqual(self.s.is_exist("py/too-big"), 0)
        self.assertEqual(lunar.error_detail(), "")

    def test_put_get(self):
        data = pattern("py/one", 100000)
        self.assertEqual(self.s.is_exist("py/one"), 0)
        self.assertEqual(self.s.put("py/one", data), 0)
        self.assertEqual(self.s.is_exist("py/one"), 1)
        self.assertEqual(self.s.get_size("py/one"), len(data))
        self.assertEqual(self.s.get("py/one"), data)
        # First value wins; bytes keys work too.
        self.assertEqual(self.s.put(b"py/one", b"other"), 0)
        self.assertEqual(self.s.get(b"py/one"), data)
        # Any bytes-like value: bytearray, memoryview, array.
        self.assertEqual(self.s.put("py/ba", bytearray(b"abc")), 0)
        self.assertEqual(self.s.put("py/mv", memoryview(b"xyz123")[2:]), 0)
        self.assertEqual(self.s.put("py/arr", array.array("i", [1, 2, 3])), 0)
        self.assertEqual(self.s.get("py/ba"), b"abc")
        self.assertEqual(self.s.get("py/mv"), b"z123")
        self.assertEqual(self.s.get("py/arr"), array.array("i", [1, 2, 3]).tobytes())

    def test_config(self):
        cfg = lunar.ReplicateConfig(replica_num=1, with_soft_pin=True)
        self.assertEqual(self.s.put("py/cfg", b"pinned", cfg), 0)
        self.assertEqual(self.s.put("py/cfg2", b"dict", {"replica_num": 1}), 0)
        self.assertEqual(self.s.get("py/cfg"), b"pinned")
        self.assertEqual(self.s.get("py/cfg2"), b"dict")

    def test_upsert(self):
        self.assertEqual(self.s.put("py/up", b"short"), 0)
        rc = self.s.upsert("py/up", b"a longer value")
        if rc == lunar.UNAVAILABLE_IN_CURRENT_STATUS:
            self.skipTest("upsert: UNAVAILABLE_IN_CURRENT_STATUS in this build")
        self.assertEqual(rc, 0)
        self.assertEqual(self.s.get("py/up"), b"a longer value")

    def test_errors(self):
        self.assertEqual(self.s.get("py/missing"), b"")
        self.assertEqual(self.s.get_size("py/missing"), lunar.OBJECT_NOT_FOUND)
        self.assertEqual(self.s.get_into("py/missing", bytearray(8)), lunar.OBJECT_NOT_FOUND)
        self.assertEqual(self.s.remove("py/missing"), lunar.OBJECT_NOT_FOUND)
        self.assertEqual(self.s.put("", b"x"), lunar.INVALID_KEY)
        self.assertEqual(self.s.put("py/empty", b""), lunar.INVALID_PARAMS)
        with self.assertRaises(TypeError):
            self.s.put(123, b"x")
        with self.assertRaises(ValueError):
            self.s.put("py/nul\0key", b"x")
        with self.assertRaises(TypeError):
            self.s.get_into("py/one", b"read-only")

    def test_get_into(self):
        data = pattern("py/into", 5000)
        self.assertEqual(self.s.put("py/into", data), 0)
        ba = bytearray(6000)
        self.assertEqual(self.s.get_into("py/into", ba), 5000)
        self.assertEqual(bytes(ba[:5000]), data)
        mv = memoryview(bytearray(5000))
        self.assertEqual(self.s.get_into("py/into", mv), 5000)
        self.assertEqual(mv.tobytes(), data)
        cbuf = ctypes.create_string_buffer(5000)
        self.assertEqual(self.s.get_into("py/into", cbuf), 5000)
        self.assertEqual(cbuf.raw, data)
        # Mooncake style: a raw pointer and a size.
        raw = ctypes.create_string_buffer(5000)
        self.assertEqual(self.s.get_into("py/into", ctypes.addressof(raw), 5000), 5000)
        self.assertEqual(raw.raw, data)
        self.assertEqual(self.s.get_into("py/into", bytearray(4999)), lunar.BUFFER_OVERFLOW)
        self.assertEqual(self.s.get_into("py/into", ba, 100), lunar.BUFFER_OVERFLOW)

    # --- batches -----------------------------------------------------------

    def test_batch_pointers(self):
        keys = ["py/b%d" % i for i in range(3)]
        vals = [pattern(k, n) for k, n in zip(keys, (5000, 64, 70001))]
        src = [ctypes.create_string_buffer(v, len(v)) for v in vals]
        ptrs = [ctypes.addressof(b) for b in src]
        sizes = [len(v) for v in vals]
        self.assertEqual(self.s.batch_put_from(keys, ptrs, sizes), [0, 0, 0])
        self.assertEqual(self.s.batch_is_exist(keys + ["py/bmissing"]), [1, 1, 1, 0])
        dst = [ctypes.create_string_buffer(n) for n in sizes] + [ctypes.create_string_buffer(8)]
        res = self.s.batch_get_into(keys + ["py/bmissing"], [ctypes.addressof(b) for b in dst],
                                    sizes + [8])
        self.assertEqual(res, sizes + [lunar.OBJECT_NOT_FOUND])
        for b, v in zip(dst, vals):
            self.assertEqual(b.raw, v)

    def test_batch_buffer_objects(self):
        keys = ["py/bo0", "py/bo1", ""]
        self.assertEqual(self.s.batch_put_from(keys, [b"zero", bytearray(b"one"), b"x"]),
                         [0, 0, lunar.INVALID_KEY])
        outs = [bytearray(4), bytearray(10), bytearray(1)]
        self.assertEqual(self.s.batch_get_into(keys, outs), [4, 3, lunar.INVALID_KEY])
        self.assertEqual(bytes(outs[0]), b"zero")
        self.assertEqual(bytes(outs[1][:3]), b"one")
        self.assertEqual(self.s.batch_put_from([], []), [])
        # Lists of different lengths: a code per key, as Mooncake returns.
        self.assertEqual(self.s.batch_put_from(["a", "b"], [b"x"]), [lunar.INVALID_PARAMS] * 2)

    def test_batch_multi_buffers(self):
        parts = [[b"ab", b"cde", b"f"], [pattern("py/mb1", 1000), b"!"]]
        keys = ["py/mb0", "py/mb1"]
        self.assertEqual(self.s.batch_put_from_multi_buffers(keys, parts), [0, 0])
        self.assertEqual(self.s.get("py/mb0"), b"abcdef")
        self.assertEqual(self.s.get("py/mb1"), pattern("py/mb1", 1000) + b"!")
        a, b, c = bytearray(1), bytearray(2), bytearray(998)
        d, e = ctypes.create_string_buffer(3), ctypes.create_string_buffer(3)
        res = self.s.batch_get_into_multi_buffers(
            keys, [[d, e], [a, b, lunar.address_of(c)]], [[3, 3], [1, 2, 998]])
        self.assertEqual(res, [6, 1001])
        self.assertEqual(d.raw + e.raw, b"abcdef")
        self.assertEqual(bytes(a + b + c), pattern("py/mb1", 1000) + b"!")

    def test_big_batch(self):
        n = 1500  # over the library's 1024-key request limit
        keys = ["py/big%d" % i for i in range(n)]
        vals = [("%08d" % i).encode() for i in range(n)]
        self.assertEqual(self.s.batch_put_from(keys, vals), [0] * n)
        outs = [bytearray(8) for _ in range(n)]
        self.assertEqual(self.s.batch_get_into(keys, outs), [8] * n)
        self.assertEqual([bytes(o) for o in outs], vals)
        self.assertEqual(self.s.batch_is_exist(keys), [1] * n)

    # --- removal -------------------------------------------------------------

    def test_remove(self):
        self.assertEqual(self.s.put("py/rm", b"x" * 100), 0)
        self.assertEqual(self.s.remove("py/rm"), 0)  # never read: no lease
        self.assertEqual(self.s.is_exist("py/rm"), 0)
        self.assertEqual(self.s.put("py/rm-leased", b"x" * 100), 0)
        self.assertEqual(self.s.is_exist("py/rm-leased"), 1)  # grants a read lease
        self.assertEqual(self.s.remove("py/rm-leased"), lunar.OBJECT_HAS_LEASE)
        self.assertEqual(self.s.remove("py/rm-leased", force=True), 0)

    def test_remove_by_regex(self):
        for i in range(3):
            self.assertEqual(self.s.put("py/re%d" % i, b"v"), 0)
        n = self.s.remove_by_regex("^py/re[01]$", force=True)
        # The master may not serve RemoveByRegex yet; then the code says so.
        if n == lunar.UNAVAILABLE_IN_CURRENT_STATUS:
            self.skipTest("remove_by_regex: UNAVAILABLE_IN_CURRENT_STATUS in this build")
        self.assertEqual(n, 2)
        self.assertEqual(self.s.batch_is_exist(["py/re0", "py/re1", "py/re2"]), [0, 0, 1])

    def test_remove_all(self):
        # A store of its own tenant, so other cases' keys are not counted.
        with lunar.Store() as t:
            self.assertEqual(t.setup(socket_path=self.proxy.sock, tenant="rmall"), 0)
            for i in range(5):
                self.assertEqual(t.put("py/all%d" % i, b"v" * 10), 0)
            self.assertEqual(t.is_exist("py/all0"), 1)  # leased: skipped without force
            self.assertEqual(t.remove_all(), 4)
            self.assertEqual(t.remove_all(force=True), 1)
            self.assertEqual(t.remove_all(force=True), 0)

    # --- memory --------------------------------------------------------------

    def test_alloc_zero_copy(self):
        mv = self.s.alloc(1 << 20)
        if mv is None:
            self.fail_with_log("alloc(1 MiB) returned None")
        self.assertFalse(mv.readonly)
        self.assertEqual(len(mv), 1 << 20)
        data = pattern("py/alloc", 1 << 20)
        mv[:] = data
        self.assertEqual(self.s.put("py/alloc", mv), 0)
        mv[:] = bytes(len(mv))
        self.assertEqual(self.s.get_into("py/alloc", mv), 1 << 20)
        self.assertEqual(mv.tobytes(), data)
        # A slice is a buffer too, and so is its address.
        self.assertEqual(self.s.put("py/alloc-small", pattern("py/alloc-small", 64)), 0)
        ptr = lunar.address_of(mv[4096:])
        self.assertEqual(self.s.batch_get_into(["py/alloc-small"], [ptr], [64]), [64])
        self.assertEqual(bytes(mv[4096:4160]), pattern("py/alloc-small", 64))
        self.s.free(mv)
        with self.assertRaises(ValueError):
            mv[0]  # released
        with self.assertRaises(ValueError):
            self.s.free(mv)

    def test_close_releases_alloc_views(self):
        with lunar.Store() as t:
            self.assertEqual(t.setup(socket_path=self.proxy.sock), 0)
            mv = t.alloc(4096)
            self.assertIsNotNone(mv)
            mv[:4] = b"abcd"
        with self.assertRaises(ValueError):
            mv[0]
        self.assertEqual(t.put("py/closed", b"x"), lunar.NOT_SET_UP)

    def test_register_buffer(self):
        # Sealed memfd memory is shared with the proxy; heap memory is accepted
        # as Mooncake accepts it, and works through the staging arena.
        heap = ctypes.create_string_buffer(1 << 16)
        self.assertEqual(self.s.register_buffer(ctypes.addressof(heap), len(heap)), 0)
        heap.raw = pattern("py/reg-heap", 1 << 16)
        self.assertEqual(self.s.put("py/reg-heap", heap), 0)
        ctypes.memset(heap, 0, len(heap))
        self.assertEqual(self.s.get_into("py/reg-heap", heap), 1 << 16)
        self.assertEqual(heap.raw, pattern("py/reg-heap", 1 << 16))
        self.assertEqual(self.s.unregister_buffer(ctypes.addressof(heap)), 0)
        if not hasattr(os, "memfd_create"):
            self.skipTest("no os.memfd_create")
        fd = os.memfd_create("test_store", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, 1 << 20)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            mm = mmap.mmap(fd, 1 << 20, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self.assertEqual(self.s.register_buffer(mm), 0)
            data = pattern("py/reg", 1 << 20)
            mm[:] = data
            self.assertEqual(self.s.put("py/reg", mm), 0)
            mm[:] = bytes(1 << 20)
            self.assertEqual(self.s.get_into("py/reg", mm), 1 << 20)
            self.assertEqual(mm[:], data)
            self.assertEqual(self.s.unregister_buffer(mm), 0)
            mm.close()
        finally:
            os.close(fd)

    # --- threads -----------------------------------------------------------

    def test_threads_share_one_store(self):
        errors = []

        def worker(t):
            try:
                for i in range(50):
                    k = "py/t%d-%d" % (t, i)
                    v = pattern(k, 3000 + i)
                    if self.s.put(k, v) != 0 or self.s.get(k) != v:
                        errors.append(k)
            except Exception as e:  # reported below, not lost in the thread
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=60)
        self.assertFalse(any(th.is_alive() for th in threads), "a worker hung")
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()
