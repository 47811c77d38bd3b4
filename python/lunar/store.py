"""Store: one connection to the node's lunar-proxy, with the core methods of
Mooncake's MooncakeDistributedStore (lifecycle, single-key and batch puts
and gets, queries, removal, memory). The rest of Mooncake's surface, built
from these, is in _extras.py.
"""

import ctypes
import logging
import threading

from . import _ffi, config as _config
from ._args import (BUFFER_OVERFLOW, INVALID_PARAMS, NOT_SET_UP, address_of, buffer_arg,
                    in_slices, iov_arrays, iov_shape_ok, key_array, key_bytes)
from ._extras import MooncakeMethods

_log = logging.getLogger("lunar")


class Store(MooncakeMethods):
    """A connection to the node's lunar-proxy, with Mooncake's
    MooncakeDistributedStore methods. Thread-safe: any number of threads may
    call one Store at once (liblunar is, and ctypes drops the GIL for the
    calls). close() must not race with other calls."""

    def __init__(self):
        self._lib = _ffi.lib()
        self._c = None  # lunar_client pointer (int) once set up
        self._lock = threading.Lock()
        self._allocs = {}  # address -> memoryview handed out by alloc()
        self._stranded = []  # sessions kept mapped for views still exported
        self._regs = {}  # address -> size given to register_buffer()
        self._hostname = None

    # --- lifecycle -----------------------------------------------------

    def setup(self, local_hostname=None, metadata_server=None,
              global_segment_size=_config.DEFAULT_SEGMENT_SIZE,
              local_buffer_size=_config.DEFAULT_LOCAL_BUFFER_SIZE, protocol="tcp",
              rdma_devices="", master_server_addr=_config.DEFAULT_MASTER, engine=None,
              enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
              enable_client_http_server=False,
              client_http_port=_config.DEFAULT_CLIENT_HTTP_PORT, socket_path=None,
              tenant=None, timeout_ms=0, master_server_address=None):
        """Connect to the proxy; 0 (also when already set up) or a code.

        Mooncake's two forms: the arguments in Mooncake's order (all but
        local_hostname may be left out here), or one dict of them (strings
        allowed: sizes like "16MB"). tenant_id is Lunar's tenant (tenant=
        overrides it). The proxy is found at socket_path, else
        $LUNAR_SOCKET, else the default path. The other arguments configure
        resources that belong to the proxy (segment, transport, devices,
        master, SSD tier, HTTP port): they are checked as Mooncake checks
        them (INVALID_PARAMS for a bad size), logged, and not acted on.
        engine (a Mooncake TransferEngine) is accepted and unused."""
        if isinstance(local_hostname, dict):
            args = _config.from_dict(local_hostname)
            if not isinstance(args, dict):
                return args
            return self.setup(**args)
        if master_server_address is not None:  # the name this module used first
            master_server_addr = master_server_address
        gss = _config.parse_size(global_segment_size)
        lbs = _config.parse_size(local_buffer_size)
        if not _config.sizes_ok(gss, lbs):
            _log.error("setup: global_segment_size=%r or local_buffer_size=%r out of bounds",
                       global_segment_size, local_buffer_size)
            return INVALID_PARAMS
        _log.info(
            "setup: local_hostname=%s metadata_server=%s global_segment_size=%s "
            "local_buffer_size=%s protocol=%s rdma_devices=%s master_server_addr=%s "
            "engine=%s enable_ssd_offload=%s ssd_offload_path=%s "
            "enable_client_http_server=%s client_http_port=%s are lunar-proxy settings; "
            "not used here", local_hostname, metadata_server, gss, lbs, protocol,
            rdma_devices, master_server_addr, type(engine).__name__ if engine else None,
            enable_ssd_offload, ssd_offload_path, enable_client_http_server,
            client_http_port)
        if tenant is None and tenant_id and tenant_id != "default":
            tenant = tenant_id
        opts = _ffi.LunarOpts()
        opts.socket_path = socket_path.encode() if isinstance(socket_path, str) else socket_path
        opts.tenant = tenant.encode() if isinstance(tenant, str) else tenant
        opts.timeout_ms = int(timeout_ms)
        with self._lock:
            if self._c is not None:
                return 0
            out = ctypes.c_void_p()
            rc = self._lib.lunar_connect(ctypes.byref(opts), ctypes.byref(out))
            if rc == 0:
                self._c = out.value
                self._hostname = _config.hostname_with_port(local_hostname)
            return rc

    def close(self):
        """Close the connection and free alloc() memory; returns 0 (also
        when not set up), as Mooncake's close does. The views alloc() handed
        out are released (using them raises ValueError). If a view is still
        exported (e.g. a numpy array over it), the memory stays mapped rather
        than pulled from under it, and a warning says so. Objects stay in
        the store: they live in the proxy, not in this process."""
        with self._lock:
            c, self._c = self._c, None
            allocs, self._allocs = self._allocs, {}
            self._regs = {}
        if c is None:
            return 0
        stuck = 0
        for mv in allocs.values():
            try:
                mv.release()
            except BufferError:
                stuck += 1
        if stuck:
            _log.warning("close: %d alloc() buffers are still exported; their memory "
                         "stays mapped until the process exits", stuck)
            self._stranded.append(c)
            return 0
        self._lib.lunar_close(c)
        return 0

    tear_down_all = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def health_check(self):
        """0 healthy, 1 not set up or proxy unreachable, 2 master unreachable."""
        c = self._c
        return 1 if c is None else self._lib.lunar_health(c)

    def get_hostname(self):
        """"host:port": setup()'s local_hostname (default: this host's name),
        with a port from Mooncake's 12300..14300 when it names none. It names
        this client, not a segment: segments are the proxies', named by their
        --host and --data-port."""
        return self._hostname or _config.hostname_with_port(None)

    # --- puts --------------------------------------------------------------

    def _put1(self, fn, key, value, size, config):
        c = self._c
        if c is None:
            return NOT_SET_UP
        cfg, ckeep, rc = _config.put_cfg(config)
        if rc:
            return rc
        addr, n, keep = buffer_arg(value, size)
        rc = fn(c, key_bytes(key), addr, n, cfg)
        del keep, ckeep
        return rc

    def put(self, key, value, config=None):
        """Store value (any bytes-like object) under key; 0 or a code. An
        existing key keeps its first value and returns 0."""
        return self._put1(self._lib.lunar_put, key, value, None, config)

    def upsert(self, key, value, config=None):
        """Store or replace key's value; 0 or a code."""
        return self._put1(self._lib.lunar_upsert, key, value, None, config)

    def put_from(self, key, buffer_ptr, size=None, config=None):
        """The value at a raw pointer (with size) or in a buffer object."""
        return self._put1(self._lib.lunar_put, key, buffer_ptr, size, config)

    def upsert_from(self, key, buffer_ptr, size=None, config=None):
        """upsert from a raw pointer (with size) or a buffer object."""
        return self._put1(self._lib.lunar_upsert, key, buffer_ptr, size, config)

    def batch_put_from(self, keys, buffer_ptrs, sizes=None, config=None):
        """Put keys[i] from buffer_ptrs[i] (int pointers with sizes, or buffer
        objects); a list of per-key codes. Lists of different lengths give
        every key INVALID_PARAMS, as in Mooncake."""
        if len(buffer_ptrs) != len(keys) or (sizes is not None and len(sizes) != len(keys)):
            return [INVALID_PARAMS] * len(keys)
        bufs = [[b] for b in buffer_ptrs]
        lens = [[s] for s in sizes] if sizes is not None else None
        return self.batch_put_from_multi_buffers(keys, bufs, lens, config)

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes=None, config=None):
        """Put keys[i] gathered from the buffers all_buffer_ptrs[i] (sizes in
        all_sizes[i]); a list of per-key codes."""
        cfg, ckeep, rc = _config.put_cfg(config)
        if rc:
            return [rc] * len(keys)
        return self._batch(keys, all_buffer_ptrs, all_sizes, False, ctypes.c_int,
                           lambda c, n, k, iovs, cnts, res:
                           self._lib.lunar_batch_put(c, n, k, iovs, cnts, cfg, res))

    # --- gets --------------------------------------------------------------

    def get(self, key):
        """The value as bytes; b'' when it cannot be read (missing, error)."""
        buf = self._read(key)
        return bytes(buf) if isinstance(buf, bytearray) else b""

    def _read(self, key):
        """The value in a new bytearray, or a code."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        k = key_bytes(key)
        # A value replaced between the size and the read may have grown: retry.
        for _ in range(4):
            size = self._lib.lunar_get_size(c, k)
            if size < 0:
                return size
            if size == 0:
                return bytearray()
            buf = bytearray(size)
            view = (ctypes.c_char * size).from_buffer(buf)
            n = self._lib.lunar_get_into(c, k, ctypes.addressof(view), size)
            del view  # lets the bytearray be resized below
            if n >= 0:
                del buf[n:]
                return buf
            if n != BUFFER_OVERFLOW:
                return n
        return BUFFER_OVERFLOW

    def get_into(self, key, buffer_ptr, size=None):
        """Read key into a writable buffer (or an int pointer with size); the
        value's size, or a code (BUFFER_OVERFLOW when it does not fit)."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        addr, n, keep = buffer_arg(buffer_ptr, size, writable=True)
        rc = self._lib.lunar_get_into(c, key_bytes(key), addr, n)
        del keep
        return rc

    def batch_get_into(self, keys, buffer_ptrs, sizes=None):
        """Read keys[i] into buffer_ptrs[i]; a list of sizes or codes. Lists
        of different lengths give every key INVALID_PARAMS."""
        if len(buffer_ptrs) != len(keys) or (sizes is not None and len(sizes) != len(keys)):
            return [INVALID_PARAMS] * len(keys)
        bufs = [[b] for b in buffer_ptrs]
        lens = [[s] for s in sizes] if sizes is not None else None
        return self.batch_get_into_multi_buffers(keys, bufs, lens)

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes=None,
                                     prefer_alloc_in_same_node=False, prefer_same_node=None):
        """Read keys[i] scattered into all_buffer_ptrs[i] in order; a list of
        sizes or codes. prefer_alloc_in_same_node (prefer_same_node in older
        Mooncake) is ignored: the proxy always reads a local replica first."""
        return self._batch(keys, all_buffer_ptrs, all_sizes, True, ctypes.c_int64,
                           self._lib.lunar_batch_get_into)

    def _batch(self, keys, bufs, sizes, writable, res_type, call):
        """Run call over the keys whose buffer and size lists line up, in
        slices of BATCH_MAX; per-key results, INVALID_PARAMS for the keys
        whose lists do not (all of them when the outer lists differ)."""
        n = len(keys)
        if len(bufs) != n or (sizes is not None and len(sizes) != n):
            return [INVALID_PARAMS] * n
        ok = [i for i in range(n)
              if bufs[i] and iov_shape_ok(bufs[i], sizes[i] if sizes is not None else None)]
        if len(ok) < n:
            out = [INVALID_PARAMS] * n
            sub = self._batch([keys[i] for i in ok], [bufs[i] for i in ok],
                              [sizes[i] for i in ok] if sizes is not None else None,
                              writable, res_type, call)
            for i, r in zip(ok, sub):
                out[i] = r
            return out
        c = self._c

        def run(off, end):
            iovs, cnts, keep = iov_arrays(bufs[off:end],
                                          sizes[off:end] if sizes is not None else None,
                                          writable)
            res = (res_type * (end - off))()
            rc = call(c, end - off, key_array(keys[off:end]), iovs, cnts, res)
            del keep
            return rc, res

        return in_slices(n, c, run)

    # --- queries and removal -------------------------------------------

    def is_exist(self, key):
        """1, 0, or a code."""
        c = self._c
        return NOT_SET_UP if c is None else self._lib.lunar_exists(c, key_bytes(key))

    def batch_is_exist(self, keys):
        """A list of 1, 0 or a code per key."""
        c = self._c

        def run(off, end):
            res = (ctypes.c_int * (end - off))()
            return self._lib.lunar_batch_exists(c, end - off, key_array(keys[off:end]), res), res

        return in_slices(len(keys), c, run)

    def get_size(self, key):
        """The value's size in bytes, or a code."""
        c = self._c
        return NOT_SET_UP if c is None else self._lib.lunar_get_size(c, key_bytes(key))

    def remove(self, key, force=False):
        """0 or a code (OBJECT_HAS_LEASE while read recently, unless force)."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        return self._lib.lunar_remove(c, key_bytes(key), int(bool(force)))

    def remove_by_regex(self, regex_pattern, force=False):
        """Remove this tenant's keys matching a POSIX ERE (Mooncake: an
        ECMAScript regex; the common subset is the same); the count or a
        code."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        return self._lib.lunar_remove_by_regex(c, key_bytes(regex_pattern), int(bool(force)))

    def remove_all(self, force=False):
        """Remove every key of this tenant; the count or a code."""
        c = self._c
        return NOT_SET_UP if c is None else self._lib.lunar_remove_all(c, int(bool(force)))

    # --- memory ----------------------------------------------------------

    def register_buffer(self, buffer_ptr, size=None):
        """Share caller memory with the proxy for zero-copy calls; 0 or a code.

        Sealed memfd memory (from alloc(), MooncakeHostMemAllocator or
        lunar_alloc in any session of this process) is shared and then
        moves without a copy; other memory is accepted as Mooncake accepts
        it (0) and works through the staging arena, one copy more."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        addr, n, keep = buffer_arg(buffer_ptr, size, writable=True)
        rc = self._lib.lunar_register(c, addr, n)
        del keep
        rc = 0 if rc == INVALID_PARAMS else rc
        if rc == 0:
            with self._lock:
                self._regs[addr] = n
        return rc

    def unregister_buffer(self, buffer_ptr):
        """Stop sharing memory given to register_buffer; 0 or a code."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        addr = buffer_ptr if isinstance(buffer_ptr, int) else address_of(buffer_ptr)
        rc = self._lib.lunar_unregister(c, addr)
        rc = 0 if rc == INVALID_PARAMS else rc
        if rc == 0:
            with self._lock:
                self._regs.pop(addr, None)
        return rc

    def _registered(self, addr, n):
        """Whether [addr, addr+n) lies inside register_buffer() or alloc()
        memory of this Store."""
        with self._lock:
            spans = list(self._regs.items())
            spans += [(p, mv.nbytes) for p, mv in self._allocs.items()]
        return any(lo <= addr and addr + n <= lo + size for lo, size in spans)

    def alloc(self, size):
        """size bytes of memory shared with the proxy (puts and gets through
        it are zero copy), as a writable memoryview; None when the arena has
        no room. Valid until free() or close()."""
        c = self._c
        if c is None or size <= 0:
            return None
        ptr = self._lib.lunar_alloc(c, int(size))
        if not ptr:
            return None
        mv = _ffi.memoryview_at(ptr, int(size))
        with self._lock:
            self._allocs[ptr] = mv
        return mv

    def free(self, buf):
        """Give back alloc() memory (the view, or its address). Raises
        BufferError while the view is still exported elsewhere."""
        if isinstance(buf, int):
            ptr = buf
        else:
            ptr = next((p for p, mv in list(self._allocs.items()) if mv is buf), None)
            if ptr is None:
                raise ValueError("not a buffer from this Store's alloc()")
        with self._lock:
            mv = self._allocs.get(ptr)
            if mv is None:
                raise ValueError("not a buffer from this Store's alloc()")
            mv.release()  # BufferError leaves the allocation in place
            del self._allocs[ptr]
            c = self._c
        if c is not None:
            self._lib.lunar_free(c, ptr)


# The name Mooncake's connectors import.
MooncakeDistributedStore = Store
