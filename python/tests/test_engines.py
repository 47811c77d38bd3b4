"""The call sequences of the engines that use Mooncake Store, driven through
`mooncake.store` against a live lunar-proxy: SGLang's HiCache Mooncake
backend, LMCache's Mooncake connector (both save paths) and vLLM's Mooncake
store connector. Each test replays, in order and with the engine's
arguments, what the engine calls on the store (read from the engines'
sources, written here from scratch); torch tensors and GPU memory are
stood in for by host memory (ctypes arrays, MooncakeHostMemAllocator),
which is all the store sees of them anyway: addresses and sizes.
"""

import asyncio
import ctypes
import os
import struct
import unittest
import uuid

import lunar_testproxy

import lunar  # noqa: E402
from mooncake.store import (MooncakeDistributedStore, MooncakeHostMemAllocator,  # noqa: E402
                            ReplicateConfig)

NO_AVAILABLE_HANDLE = -200


class HostPool:
    """A host KV pool of `pages` pages of `page_bytes` for K and as many for
    V (SGLang's MHA layout: K pages, then V pages), like a pinned tensor."""

    def __init__(self, pages, page_bytes, allocator=None):
        self.pages, self.page_bytes = pages, page_bytes
        self.size = 2 * pages * page_bytes
        if allocator is not None:
            self.base = allocator.alloc(self.size)
            self._mem = None
        else:
            self._mem = (ctypes.c_ubyte * self.size)()
            self.base = ctypes.addressof(self._mem)

    def k(self, i):
        return self.base + i * self.page_bytes

    def v(self, i):
        return self.base + (self.pages + i) * self.page_bytes

    def fill(self, i, seed):
        ctypes.memmove(self.k(i), bytes([seed & 0xFF]) * self.page_bytes, self.page_bytes)
        ctypes.memmove(self.v(i), bytes([(seed + 1) & 0xFF]) * self.page_bytes,
                       self.page_bytes)

    def clear(self, i):
        ctypes.memset(self.k(i), 0, self.page_bytes)
        ctypes.memset(self.v(i), 0, self.page_bytes)

    def check(self, i, seed):
        return (ctypes.string_at(self.k(i), self.page_bytes) ==
                bytes([seed & 0xFF]) * self.page_bytes and
                ctypes.string_at(self.v(i), self.page_bytes) ==
                bytes([(seed + 1) & 0xFF]) * self.page_bytes)


def sglang_setup(store, standalone, required_bytes=0):
    """MooncakeStore.__init__: setup (or setup_dummy for a standalone store
    process), retrying without the keywords a TypeError names, then warmup."""
    if standalone:
        rc = store.setup_dummy(required_bytes, 16 << 20, "127.0.0.1:50052")
    else:
        kwargs = {"enable_client_http_server": True, "client_http_port": 9310,
                  "enable_ssd_offload": False, "ssd_offload_path": "",
                  "tenant_id": "default"}
        while True:
            try:
                rc = store.setup("127.0.0.1", "P2PHANDSHAKE", (4 << 30) // 2, 16 << 20, "tcp",
                                 "", "127.0.0.1:50051", None, **kwargs)
                break
            except TypeError as e:
                drop = [k for k in kwargs if k in str(e)]
                if not drop:
                    raise
                for k in drop:
                    kwargs.pop(k)
    if rc:
        raise RuntimeError("setup: %d" % rc)
    key = "sglang_mooncake_store_warmup_key" + uuid.uuid4().hex
    value = bytes(4 * 1024)
    assert store.put(key, value) == 0
    assert store.is_exist(key) == 1
    assert store.get(key) == value


class SGLangHiCacheTest(unittest.TestCase):
    """sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py"""

    PAGES, PAGE = 8, 16 << 10

    def setUp(self):
        lunar_testproxy.socket_path()
        self.prefix = "model-" + uuid.uuid4().hex[:8]

    def page_keys(self, n):
        return ["%s_%d" % (self.prefix, i) for i in range(n)]

    def mha_meta(self, pool, keys, first_page):
        """_get_mha_buffer_meta: per page a _k and a _v object."""
        key_strs, ptrs, sizes = [], [], []
        for j, key in enumerate(keys):
            key_strs += ["%s_0_k" % key, "%s_0_v" % key]
            ptrs += [pool.k(first_page + j), pool.v(first_page + j)]
            sizes += [pool.page_bytes, pool.page_bytes]
        return key_strs, ptrs, sizes

    def batch_set_v1(self, store, pool, keys, first_page):
        key_strs, ptrs, sizes = self.mha_meta(pool, keys, first_page)
        exist = store.batch_is_exist(key_strs)
        results = [0 if e == 1 else -1 for e in exist]
        missing = [i for i, e in enumerate(exist) if e != 1]
        if missing:
            put = store.batch_put_from([key_strs[i] for i in missing], [ptrs[i] for i in missing],
                                       [sizes[i] for i in missing])
            for i, r in zip(missing, put):
                results[i] = r
        return [all(r == 0 for r in results[i:i + 2]) for i in range(0, len(results), 2)]

    def batch_exists(self, store, keys):
        query = []
        for key in keys:
            query += ["%s_0_k" % key, "%s_0_v" % key]
        exist = store.batch_is_exist(query)
        for i, e in enumerate(exist):
            if e != 1:
                return i // 2
        return len(query) // 2

    def batch_get_v1(self, store, pool, keys, first_page):
        key_strs, ptrs, sizes = self.mha_meta(pool, keys, first_page)
        res = store.batch_get_into(key_strs, ptrs, sizes)
        return [all(r > 0 for r in res[i:i + 2]) for i in range(0, len(res), 2)]

    def run_sequence(self, standalone):
        store = MooncakeDistributedStore()
        allocator = MooncakeHostMemAllocator() if standalone else None
        pool = HostPool(self.PAGES, self.PAGE, allocator)
        sglang_setup(store, standalone, pool.size)
        self.assertEqual(store.register_buffer(pool.base, pool.size), 0)
        keys = self.page_keys(4)
        for i in range(4):
            pool.fill(i, i * 3)
        self.assertEqual(self.batch_exists(store, keys), 0)
        self.assertEqual(self.batch_set_v1(store, pool, keys[:2], 0), [True, True])
        self.assertEqual(self.batch_exists(store, keys), 2)
        # Pages already stored are skipped by batch_is_exist, the rest put.
        self.assertEqual(self.batch_set_v1(store, pool, keys, 0), [True] * 4)
        self.assertEqual(self.batch_exists(store, keys), 4)
        for i in range(4, 8):  # load into other pages of the pool
            pool.clear(i)
        self.assertEqual(self.batch_get_v1(store, pool, keys, 4), [True] * 4)
        for j in range(4):
            self.assertTrue(pool.check(4 + j, j * 3))
        missing = self.page_keys(6)[4:]
        self.assertEqual(self.batch_get_v1(store, pool, missing, 4), [False, False])
        # MLA / layer-first: one object per page from several buffers.
        mla_keys = ["%s_%d_k" % (self.prefix + "mla", i) for i in range(2)]
        ptr_lists = [[pool.k(i), pool.v(i)] for i in range(2)]
        size_lists = [[pool.page_bytes, pool.page_bytes]] * 2
        self.assertEqual(store.batch_put_from_multi_buffers(mla_keys, ptr_lists, size_lists,
                                                            ReplicateConfig()), [0, 0])
        pool.clear(6)
        pool.clear(7)
        got = store.batch_get_into_multi_buffers(mla_keys, [[pool.k(6), pool.v(6)],
                                                            [pool.k(7), pool.v(7)]], size_lists)
        self.assertEqual(got, [2 * pool.page_bytes] * 2)
        self.assertTrue(pool.check(6, 0) and pool.check(7, 3))
        # clear(): remove_all without force (objects read within their lease
        # stay, as in Mooncake); the store itself is never closed by SGLang.
        self.assertGreaterEqual(store.remove_all(), 0)
        store.remove_all(force=True)
        self.assertEqual(self.batch_exists(store, keys), 0)
        store.unregister_buffer(pool.base)
        store.close()

    def test_embedded(self):
        self.run_sequence(standalone=False)

    def test_standalone_storage(self):
        self.run_sequence(standalone=True)


def remote_metadata(length):
    """LMCache's RemoteMetadata: 28 bytes (length, shape, dtype, format)."""
    return struct.pack("<7i", length, 2, 16, 8, 128, 5, 1)


class LMCacheConnectorTest(unittest.TestCase):
    """lmcache/v1/storage_backend/connector/mooncakestore_connector.py"""

    CHUNK = 64 << 10

    def setUp(self):
        lunar_testproxy.socket_path()
        self.loop = asyncio.new_event_loop()
        self.addCleanup(self.loop.close)
        self.store = MooncakeDistributedStore()
        # The connector ignores setup's return; a failure shows up later.
        self.assertEqual(self.store.setup("localhost", "http://127.0.0.1:8080/metadata",
                                          3355443200, 1073741824, "tcp", "",
                                          "127.0.0.1:50051"), 0)
        self.replica_config = ReplicateConfig()
        self.replica_config.replica_num = 1
        self.replica_config.preferred_segment = self.store.get_hostname()  # prefer_local_alloc
        # _register_cpu_buffer: the pinned CPU buffer of the local backend.
        self.cpu = (ctypes.c_ubyte * (8 * self.CHUNK))()
        self.cpu_ptr = ctypes.addressof(self.cpu)
        self.assertEqual(self.store.register_buffer(self.cpu_ptr, len(self.cpu)), 0)

    def tearDown(self):
        # close(): unregister, then close the store.
        self.assertEqual(self.store.unregister_buffer(self.cpu_ptr), 0)
        self.assertEqual(self.store.close(), 0)

    def run_async(self, fn, *args, timeout=5.0):
        async def go():
            return await asyncio.wait_for(asyncio.to_thread(fn, *args), timeout=timeout)
        return self.loop.run_until_complete(go())

    def chunk(self, i):
        return memoryview(self.cpu)[i * self.CHUNK:(i + 1) * self.CHUNK].cast("B")

    def key(self, i):
        return "vllm@model@1@0@%s%d" % (self.id().rsplit(".", 1)[1], i)

    def test_save_with_metadata_put_parts(self):
        """save_chunk_meta=True (the default): put_parts(key, metadata, kv);
        batched_get through batch_get_buffer."""
        for i in range(3):
            self.chunk(i)[:] = os.urandom(self.CHUNK)
            kv = self.chunk(i)
            self.assertEqual(self.run_async(self.store.put_parts, self.key(i),
                                            remote_metadata(len(kv)), kv), 0)
            self.assertTrue(self.store.is_exist(self.key(i)))
        keys = [self.key(i) for i in range(4)]
        buffers = self.run_async(self.store.batch_get_buffer, keys)
        self.assertIsNone(buffers[3])
        for i, buf in enumerate(buffers[:3]):
            view = memoryview(buf)
            length = struct.unpack("<i", view[:4])[0]
            self.assertEqual(len(view), length + 28)
            self.assertEqual(bytes(view[28:]), bytes(self.chunk(i)))

    def test_save_without_metadata_put_from(self):
        """save_chunk_meta=False: put_from(key, ptr, size, replica_config)
        from the registered buffer; batched_get through batch_get_into."""
        for i in range(3):
            self.chunk(i)[:] = os.urandom(self.CHUNK)
            rc = self.run_async(self.store.put_from, self.key(i), self.cpu_ptr + i * self.CHUNK,
                                self.CHUNK, self.replica_config)
            self.assertEqual(rc, 0)
        keys = [self.key(i) for i in range(4)]
        ptrs = [self.cpu_ptr + (4 + i) * self.CHUNK for i in range(4)]
        read = self.run_async(self.store.batch_get_into, keys, ptrs, [self.CHUNK] * 4)
        self.assertEqual(read[:3], [self.CHUNK] * 3)
        self.assertLess(read[3], 0)
        for i in range(3):
            self.assertEqual(bytes(self.chunk(4 + i)), bytes(self.chunk(i)))


class VLLMStoreConnectorTest(unittest.TestCase):
    """vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/worker.py"""

    BLOCK = 32 << 10

    def setUp(self):
        lunar_testproxy.socket_path()

    def make_worker(self):
        store = MooncakeDistributedStore()
        self.assertEqual(store.setup("127.0.0.1", "P2PHANDSHAKE", 4 << 30, 4 << 30, "rdma",
                                     "", "127.0.0.1:50051"), 0)
        cfg = ReplicateConfig()  # no preferred_segment configured
        return store, cfg

    def test_save_lookup_load_reset(self):
        store, cfg = self.make_worker()
        blocks = 6
        kv = (ctypes.c_ubyte * (2 * blocks * self.BLOCK))()  # K/V-first layout
        base = ctypes.addressof(kv)
        self.assertEqual(store.register_buffer(base, len(kv)), 0)
        for b in range(blocks):
            ctypes.memmove(base + b * self.BLOCK, os.urandom(self.BLOCK), self.BLOCK)
            ctypes.memmove(base + (blocks + b) * self.BLOCK, os.urandom(self.BLOCK), self.BLOCK)
        prefix = "model@tp0@pcp0@dcp0@pp0@g0@" + uuid.uuid4().hex[:6]
        keys = ["%s@%032x" % (prefix, b) for b in range(3)]

        def addrs(b):
            return [base + b * self.BLOCK, base + (blocks + b) * self.BLOCK]

        # Sending thread: dedup with batch_is_exist, then one multi-buffer put.
        exists = store.batch_is_exist(keys)
        missing = [i for i, e in enumerate(exists) if e != 1]
        self.assertEqual(missing, [0, 1, 2])
        res = store.batch_put_from_multi_buffers([keys[i] for i in missing],
                                                 [addrs(i) for i in missing],
                                                 [[self.BLOCK] * 2 for _ in missing], cfg)
        self.assertEqual([r for r in res if r < 0], [])
        # Lookup server: every candidate key must exist.
        self.assertEqual(store.batch_is_exist(keys), [1, 1, 1])
        # Receiving thread: tier lookup (logging), then one multi-buffer get
        # into blocks 3..5.
        tiers = store.batch_get_replica_desc(keys)
        self.assertEqual(sorted(tiers), sorted(keys))
        got = store.batch_get_into_multi_buffers(keys, [addrs(3 + i) for i in range(3)],
                                                 [[self.BLOCK] * 2] * 3)
        self.assertEqual(got, [2 * self.BLOCK] * 3)
        for i in range(3):
            for a, b in zip(addrs(i), addrs(3 + i)):
                self.assertEqual(ctypes.string_at(a, self.BLOCK), ctypes.string_at(b, self.BLOCK))
        # Reset through the lookup channel, then close.
        self.assertGreaterEqual(store.remove_all(force=True), 3)
        self.assertEqual(store.batch_is_exist(keys), [0, 0, 0])
        self.assertEqual(store.unregister_buffer(base), 0)
        self.assertEqual(store.close(), 0)


class BackPressureTest(unittest.TestCase):
    """A full store answers puts with NO_AVAILABLE_HANDLE (-200), which
    vLLM's sending thread and Mooncake's published tests act on."""

    def test_full_segment(self):
        old = lunar_testproxy.SEGMENT
        lunar_testproxy.SEGMENT = "16MiB"
        try:
            proxy = lunar_testproxy.Proxy().start()
        finally:
            lunar_testproxy.SEGMENT = old
        self.addCleanup(proxy.stop)
        store = MooncakeDistributedStore()
        self.assertEqual(store.setup("localhost", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                                     "127.0.0.1:50051", socket_path=proxy.sock), 0)
        self.addCleanup(store.close)
        pinned = ReplicateConfig()
        pinned.with_hard_pin = True
        value = bytes(1 << 20)
        codes = [store.put("bp/%d" % i, value, pinned) for i in range(24)]
        self.assertIn(NO_AVAILABLE_HANDLE, codes)
        self.assertEqual(set(codes), {0, NO_AVAILABLE_HANDLE})
        res = store.batch_put_from_multi_buffers(["bp/x", "bp/y"], [[value], [value]], None,
                                                 ReplicateConfig())
        self.assertEqual(res, [NO_AVAILABLE_HANDLE] * 2)
        self.assertEqual(lunar.NO_AVAILABLE_HANDLE, NO_AVAILABLE_HANDLE)


if __name__ == "__main__":
    unittest.main()
