"""mooncake.store (python/mooncake-compat) over a live lunar-proxy: the forms
of setup(), close()'s return, get_hostname's format, ReplicateConfig and
SoftPinAction, per-key codes for batch lists of different lengths, and the
methods composed in Python (put_parts, put_batch, get_buffer,
batch_get_buffer, get_into_ranges, replica descriptors, the host memory
allocator). Run: python3 -m unittest discover -s python/tests
"""

import ctypes
import os
import unittest
import uuid

import lunar_testproxy

import lunar  # noqa: E402  (lunar_testproxy set the paths)
from mooncake.store import (MooncakeDistributedStore, MooncakeHostMemAllocator,  # noqa: E402
                            ReplicateConfig, SoftPinAction)

MOONCAKE_ARGS = ("localhost", "http://127.0.0.1:8080/metadata", 3200 << 20, 512 << 20, "tcp",
                 "ibp6s0", "127.0.0.1:50051")


def config_dict(gss="16MB", lbs="16 MB", **more):
    d = {"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
         "global_segment_size": gss, "local_buffer_size": lbs, "protocol": "tcp",
         "rdma_devices": "", "master_server_addr": "127.0.0.1:50051"}
    d.update(more)
    return d


def uniq(name):
    return "pyc/%s/%s" % (name, uuid.uuid4().hex[:8])


class SetupTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        lunar_testproxy.socket_path()

    def store(self):
        s = MooncakeDistributedStore()
        self.addCleanup(s.close)
        return s

    def test_positional_form(self):
        s = self.store()
        self.assertEqual(s.setup(*MOONCAKE_ARGS), 0)
        self.assertEqual(s.health_check(), 0)

    def test_newer_keywords(self):
        s = self.store()
        rc = s.setup(*MOONCAKE_ARGS, None, enable_ssd_offload=True, ssd_offload_path="/nvme",
                     tenant_id="default", enable_client_http_server=True,
                     client_http_port=9301)
        self.assertEqual(rc, 0)
        s2 = self.store()
        self.assertEqual(s2.setup(*MOONCAKE_ARGS, engine=None), 0)

    def test_unknown_keyword_is_a_type_error(self):
        # SGLang retries without the keywords a TypeError names.
        with self.assertRaises(TypeError):
            self.store().setup(*MOONCAKE_ARGS, no_such_option=True)

    def test_dict_form(self):
        s = self.store()
        self.assertEqual(s.setup(config_dict()), 0)
        key = uniq("dict")
        self.assertEqual(s.put(key, b"v"), 0)
        self.assertEqual(s.get(key), b"v")

    def test_dict_form_bad_values(self):
        inv = lunar.INVALID_PARAMS
        self.assertEqual(self.store().setup(config_dict(gss="50%")), inv)
        self.assertEqual(self.store().setup(config_dict(lbs="lots")), inv)
        self.assertEqual(self.store().setup(config_dict(client_http_port="80a")), inv)
        d = config_dict()
        del d["local_hostname"]
        self.assertEqual(self.store().setup(d), inv)

    def test_sizes_bounds(self):
        args = list(MOONCAKE_ARGS)
        args[2] = 512  # a segment under 1 KiB
        self.assertEqual(self.store().setup(*args), lunar.INVALID_PARAMS)
        args[2], args[3] = 0, 0  # 0 means none: allowed
        self.assertEqual(self.store().setup(*args), 0)

    def test_tenant_id_is_the_tenant(self):
        a, b = self.store(), self.store()
        self.assertEqual(a.setup(*MOONCAKE_ARGS), 0)
        self.assertEqual(b.setup(*MOONCAKE_ARGS, tenant_id="other"), 0)
        key = uniq("tenant")
        self.assertEqual(a.put(key, b"a"), 0)
        self.assertEqual(b.is_exist(key), 0)

    def test_setup_dummy_and_init_all(self):
        self.assertEqual(self.store().setup_dummy(64 << 20, 16 << 20, "127.0.0.1:50052"), 0)
        self.assertEqual(self.store().init_all("tcp", ""), 0)

    def test_close_returns_zero(self):
        s = MooncakeDistributedStore()
        self.assertEqual(s.close(), 0)  # never set up
        self.assertEqual(s.setup(*MOONCAKE_ARGS), 0)
        self.assertEqual(s.close(), 0)
        self.assertEqual(s.close(), 0)
        self.assertEqual(s.health_check(), 1)
        self.assertEqual(s.setup(*MOONCAKE_ARGS), 0)  # set up again after close
        self.assertEqual(s.health_check(), 0)
        self.assertEqual(s.close(), 0)

    def test_get_hostname(self):
        s = self.store()
        self.assertEqual(s.setup(*MOONCAKE_ARGS), 0)
        host, port = s.get_hostname().split(":")
        self.assertEqual(host, "localhost")
        self.assertTrue(12300 <= int(port) <= 14300)
        s2 = self.store()
        self.assertEqual(s2.setup("node7:12345", *MOONCAKE_ARGS[1:]), 0)
        self.assertEqual(s2.get_hostname(), "node7:12345")


class ReplicateConfigTest(unittest.TestCase):
    def test_defaults(self):
        c = ReplicateConfig()
        self.assertEqual(c.replica_num, 1)
        self.assertEqual(c.soft_pin_action, SoftPinAction.PRESERVE)
        self.assertIsNone(c.soft_pin_ttl_ms)
        self.assertFalse(c.with_hard_pin)
        self.assertEqual(c.preferred_segment, "")
        self.assertEqual(c.preferred_segments, [])
        self.assertEqual(c.nof_replica_num, 0)
        self.assertFalse(c.prefer_alloc_in_same_node)
        self.assertFalse(hasattr(c, "group_ids"))  # SGLang then skips group semantics

    def test_ttl_checks_and_str(self):
        c = ReplicateConfig()
        c.soft_pin_ttl_ms = 1000
        self.assertEqual(c.soft_pin_ttl_ms, 1000)
        c.soft_pin_ttl_ms = None
        for bad in (-1, 1 << 64, "5", 1.5):
            with self.assertRaises(TypeError):
                c.soft_pin_ttl_ms = bad
        c.replica_num = 3
        self.assertIn("3", str(c))

    def test_with_soft_pin_alias(self):
        c = ReplicateConfig()
        c.with_soft_pin = True
        self.assertEqual(c.soft_pin_action, SoftPinAction.ENABLE)
        self.assertTrue(c.with_soft_pin)


class LiveStoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        lunar_testproxy.socket_path()
        cls.s = MooncakeDistributedStore()
        if cls.s.setup(*MOONCAKE_ARGS) != 0:
            raise RuntimeError("setup failed")
        cls.addClassCleanup(cls.s.close)

    def test_soft_pin_forwarding(self):
        key = uniq("pin")
        on = ReplicateConfig()
        on.soft_pin_action = SoftPinAction.ENABLE
        on.soft_pin_ttl_ms = 1000
        self.assertEqual(self.s.put(key, b"v", on), 0)
        ttl_only = ReplicateConfig()
        ttl_only.soft_pin_ttl_ms = 1000
        self.assertEqual(self.s.upsert(key, b"v", ttl_only), lunar.INVALID_PARAMS)
        off = ReplicateConfig()
        off.soft_pin_action = SoftPinAction.DISABLE
        off.soft_pin_ttl_ms = 1000
        self.assertEqual(self.s.upsert(key, b"v", off), lunar.INVALID_PARAMS)
        off.soft_pin_ttl_ms = None
        self.assertEqual(self.s.upsert(key, b"w", off), 0)
        self.assertEqual(self.s.get(key), b"w")

    def test_preferred_segment_and_hard_pin(self):
        c = ReplicateConfig()
        c.preferred_segment = self.s.get_hostname()  # LMCache's prefer_local_alloc
        c.with_hard_pin = True
        key = uniq("pref")
        self.assertEqual(self.s.put(key, b"v", c), 0)
        self.assertEqual(self.s.get(key), b"v")
        c2 = ReplicateConfig()
        c2.nof_replica_num = 1  # no NVMe-oF tier in Lunar
        self.assertEqual(self.s.put(uniq("nof"), b"v", c2), lunar.INVALID_PARAMS)

    def test_mismatched_batch_lengths(self):
        inv = lunar.INVALID_PARAMS
        keys = [uniq("mm%d" % i) for i in range(3)]
        bufs = [(ctypes.c_char * 8)() for _ in range(3)]
        ptrs = [ctypes.addressof(b) for b in bufs]
        self.assertEqual(self.s.batch_put_from(keys[:2], ptrs, [8] * 3), [inv, inv])
        self.assertEqual(self.s.batch_get_into(keys[:2], ptrs, [8] * 3), [inv, inv])
        self.assertEqual(self.s.batch_put_from(keys, ptrs, [8, 8]), [inv] * 3)
        self.assertEqual(self.s.batch_put_from_multi_buffers(keys[:2], [[ptrs[0]]], [[8]]),
                         [inv, inv])
        # One key's own lists differ: only that key fails.
        res = self.s.batch_put_from_multi_buffers(keys[:2], [[ptrs[0]], [ptrs[1], ptrs[2]]],
                                                  [[8], [8]])
        self.assertEqual(res, [0, inv])
        res = self.s.batch_get_into_multi_buffers(keys[:2], [[ptrs[1]], [ptrs[2]]],
                                                  [[8], [8, 8]])
        self.assertEqual(res, [8, inv])
        self.assertEqual(self.s.put_batch(keys, [b"a", b"b"]), inv)
        self.assertEqual(self.s.batch_put_from([], [], []), [])
        self.assertEqual(self.s.batch_get_into([], [], []), [])

    def test_put_batch_and_get_batch(self):
        keys = [uniq("pb%d" % i) for i in range(3)]
        vals = [b"one", bytearray(b"two"), memoryview(b"three")]
        self.assertEqual(self.s.put_batch(keys, vals), 0)
        self.assertEqual(self.s.get_batch(keys + [uniq("none")]),
                         [b"one", b"two", b"three", b""])
        self.assertEqual(self.s.put_batch([""], [b"x"]), lunar.INVALID_KEY)

    def test_put_parts_and_buffers(self):
        key = uniq("parts")
        meta, kv = b"M" * 28, os.urandom(100000)
        self.assertEqual(self.s.put_parts(key, meta, kv), 0)
        buf = self.s.get_buffer(key)
        self.assertEqual(buf.size(), 100028)
        self.assertEqual(len(buf), 100028)
        self.assertEqual(bytes(memoryview(buf)[:28]), meta)
        self.assertEqual(bytes(buf)[28:], kv)
        self.assertEqual(ctypes.string_at(buf.ptr(), 4), b"MMMM")
        self.assertIsNone(self.s.get_buffer(uniq("none")))
        self.assertEqual(self.s.put_parts(uniq("none")), lunar.INVALID_PARAMS)
        many = [bytes([i]) for i in range(100)]  # more parts than one iovec list holds
        key2 = uniq("many")
        self.assertEqual(self.s.put_parts(key2, *many), 0)
        self.assertEqual(self.s.get(key2), bytes(range(100)))
        res = self.s.batch_get_buffer([key, uniq("none"), key2])
        self.assertEqual(bytes(res[0]), meta + kv)
        self.assertIsNone(res[1])
        self.assertEqual(bytes(res[2]), bytes(range(100)))
        self.assertEqual(self.s.batch_get_buffer([]), [])
        self.assertEqual(self.s.upsert_parts(key2, b"x", b"y"), 0)
        self.assertEqual(self.s.get(key2), b"xy")

    def test_get_into_ranges(self):
        k1, k2 = uniq("r1"), uniq("r2")
        d1, d2 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz0123456789"
        self.assertEqual(self.s.put(k1, d1), 0)
        self.assertEqual(self.s.put(k2, d2), 0)
        b0, b1 = (ctypes.c_ubyte * 32)(), (ctypes.c_ubyte * 32)()
        p0, p1 = ctypes.addressof(b0), ctypes.addressof(b1)
        self.assertEqual(self.s.register_buffer(p0, 32), 0)
        self.assertEqual(self.s.register_buffer(p1, 32), 0)
        res = self.s.get_into_ranges([p0, p1], [[k1, k2], [k2, k1]],
                                     [[[0, 20], [8]], [[4], [16]]],
                                     [[[1, 30], [2]], [[0], [10]]],
                                     [[[4, 3], [5]], [[6], [4]]])
        self.assertEqual(res, [[[4, 3], [5]], [[6], [4]]])
        self.assertEqual(bytes(b0[0:4]), d1[1:5])
        self.assertEqual(bytes(b0[20:23]), d1[30:33])
        self.assertEqual(bytes(b0[8:13]), d2[2:7])
        self.assertEqual(bytes(b1[4:10]), d2[0:6])
        self.assertEqual(bytes(b1[16:20]), d1[10:14])
        # Source past the value's end, destination past the registered range,
        # a missing key next to a good one, and an unregistered destination.
        self.assertLess(self.s.get_into_ranges([p0], [[k1]], [[[0]]], [[[35]]], [[[4]]])[0][0][0], 0)
        self.assertLess(self.s.get_into_ranges([p0], [[k1]], [[[31]]], [[[0]]], [[[4]]])[0][0][0], 0)
        res = self.s.get_into_ranges([p0], [[uniq("none"), k1]], [[[0], [8]]], [[[0], [0]]],
                                     [[[4], [4]]])
        self.assertLess(res[0][0][0], 0)
        self.assertEqual(res[0][1][0], 4)
        other = (ctypes.c_ubyte * 8)()
        res = self.s.get_into_ranges([ctypes.addressof(other)], [[k1]], [[[0]]], [[[0]]], [[[4]]])
        self.assertEqual(res, [[[lunar.INVALID_PARAMS]]])
        self.assertEqual(self.s.unregister_buffer(p0), 0)
        self.assertEqual(self.s.unregister_buffer(p1), 0)

    def test_replica_desc_and_batch_remove(self):
        k = uniq("desc")
        self.assertEqual(self.s.put(k, b"v"), 0)
        descs = self.s.batch_get_replica_desc([k, uniq("none")])
        self.assertEqual(len(descs[k]), 1)
        self.assertFalse(descs[k][0].is_memory_replica())  # the tier is the proxy's
        self.assertEqual(list(descs.values())[1], [])
        self.assertEqual(self.s.get_replica_desc(k)[0].status.name, "COMPLETE")
        res = self.s.batch_remove([k, uniq("none")], force=True)
        self.assertEqual(res, [0, lunar.OBJECT_NOT_FOUND])

    def test_host_mem_allocator_zero_copy(self):
        alloc = MooncakeHostMemAllocator()
        size = 1 << 20
        ptr = alloc.alloc(size)
        self.assertNotEqual(ptr, 0)
        self.assertEqual(self.s.register_buffer(ptr, size), 0)
        ctypes.memmove(ptr, b"z" * 4096, 4096)
        key = uniq("host")
        self.assertEqual(self.s.batch_put_from([key], [ptr], [4096]), [0])
        ctypes.memset(ptr, 0, 4096)
        self.assertEqual(self.s.batch_get_into([key], [ptr + 8192], [4096]), [4096])
        self.assertEqual(ctypes.string_at(ptr + 8192, 4096), b"z" * 4096)
        self.assertEqual(self.s.unregister_buffer(ptr), 0)
        self.assertEqual(alloc.free(ptr), 0)
        self.assertEqual(alloc.free(ptr), lunar.INVALID_PARAMS)

    def test_alloc_from_mem_pool(self):
        ptr = self.s.alloc_from_mem_pool(4096)
        self.assertNotEqual(ptr, 0)
        ctypes.memmove(ptr, b"pool", 4)
        key = uniq("pool")
        self.assertEqual(self.s.put_from(key, ptr, 4), 0)
        self.assertEqual(self.s.get(key), b"pool")
        self.s.free(ptr)


if __name__ == "__main__":
    unittest.main()
