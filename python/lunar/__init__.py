"""Lunar's Python client: ctypes over liblunar, no compiled extension.

``Store`` has the method names of Mooncake's ``MooncakeDistributedStore`` so
connectors written for Mooncake port by changing the import. Like Mooncake,
calls return ints (0 or a count/size on success, a negative code from
SPEC section 9 on failure) rather than raising; ``get`` returns ``b''`` when the
key cannot be read. Programming errors (wrong types, mismatched list
lengths) raise ``TypeError``/``ValueError``.

The store is the node's lunar-proxy: ``setup`` connects to it over its UNIX
socket, and Mooncake's resource arguments (segment sizes, protocol, devices,
master address) are the proxy's configuration, logged and ignored here.
"""

import ctypes
import logging
import socket
import threading

from . import _ffi

__all__ = [
    "Store",
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "strerror",
    "address_of",
]

_log = logging.getLogger("lunar")

# Error codes (lunar.h, Mooncake's numbering plus the sidecar's own).
OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
INVALID_KEY = -400
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
NO_AVAILABLE_HANDLE = -200
UNAVAILABLE_IN_CURRENT_STATUS = -1010
PROXY_UNAVAILABLE = -2000
# What a call on a Store that is not set up (or is closed) returns, as
# Mooncake's C API does for a NULL handle.
NOT_SET_UP = -1


def strerror(code):
    """lunar_strerror's name for code (e.g. 'OBJECT_NOT_FOUND')."""
    return _ffi.lib().lunar_strerror(int(code)).decode()


class ReplicateConfig:
    """Mooncake's ReplicateConfig: replica_num, with_soft_pin, with_hard_pin,
    preferred_segments (preferred_segment, a single name, is accepted too)."""

    def __init__(
        self,
        replica_num=1,
        with_soft_pin=False,
        with_hard_pin=False,
        preferred_segments=None,
        preferred_segment=None,
    ):
        self.replica_num = replica_num
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segments = list(preferred_segments or [])
        self.preferred_segment = preferred_segment

    def __repr__(self):
        return "ReplicateConfig(replica_num=%r, with_soft_pin=%r, with_hard_pin=%r, " \
            "preferred_segments=%r)" % (self.replica_num, self.with_soft_pin,
                                        self.with_hard_pin, self.preferred_segments)


def _cfg(config):
    """A struct lunar_put_cfg (and what must outlive the call) from a
    ReplicateConfig, a dict with the same keys, any object with those
    attributes, or None (one replica, no pins)."""
    if config is None:
        return None, None
    get = config.get if isinstance(config, dict) else (lambda k, d: getattr(config, k, d))
    segs = list(get("preferred_segments", None) or [])
    one = get("preferred_segment", None)
    if one:
        segs.insert(0, one)
    cfg = _ffi.LunarPutCfg()
    cfg.replica_num = int(get("replica_num", 1) or 1)
    cfg.soft_pin = 1 if get("with_soft_pin", False) else 0
    cfg.hard_pin = 1 if get("with_hard_pin", False) else 0
    keep = None
    if segs:
        keep = (ctypes.c_char_p * len(segs))(*[_key(s) for s in segs])
        cfg.preferred_segments = keep
        cfg.preferred_count = len(segs)
    return cfg, keep


def _key(key):
    if isinstance(key, str):
        key = key.encode()
    elif not isinstance(key, (bytes, bytearray)):
        raise TypeError("a key is str or bytes, not %s" % type(key).__name__)
    if b"\0" in key:
        raise ValueError("a key cannot contain NUL")
    return bytes(key)


def _keys(keys):
    enc = [_key(k) for k in keys]
    return (ctypes.c_char_p * len(enc))(*enc)


def _buffer(buf, size=None, writable=False):
    """(address, length, keep-alive) for buf: an int pointer (size required,
    as Mooncake passes them), a ctypes object, or any object with the buffer
    protocol (bytes, bytearray, memoryview, array, mmap, numpy arrays...).
    Read-only buffers other than bytes are copied once for puts."""
    if isinstance(buf, int) and not isinstance(buf, bool):
        if size is None:
            raise ValueError("a raw pointer needs a size")
        return buf, int(size), None
    mv = memoryview(buf)  # ctypes arrays and structures are buffers too
    if not mv.c_contiguous:
        raise ValueError("buffer is not contiguous")
    n = mv.nbytes
    if mv.readonly:
        if writable:
            raise TypeError("buffer is read-only")
        data = buf if isinstance(buf, bytes) else mv.tobytes()
        keep = ctypes.c_char_p(data)  # points into data, no copy
        addr = ctypes.cast(keep, ctypes.c_void_p).value
        keep = (keep, data)
    else:
        keep = (ctypes.c_char * n).from_buffer(mv)
        addr = ctypes.addressof(keep)
    if size is not None:
        if size > n:
            raise ValueError("size %d is larger than the buffer (%d bytes)" % (size, n))
        n = int(size)
    return addr, n, keep


def address_of(buf):
    """The address of a writable buffer object, for the Mooncake-style calls
    that take raw pointers. The caller keeps buf alive while it is used."""
    return _buffer(buf, writable=True)[0]


def _iov_arrays(bufs_per_key, sizes_per_key, writable):
    """Per-key iovec arrays for a batch: (iovs, counts, keep-alive)."""
    n = len(bufs_per_key)
    if sizes_per_key is not None and len(sizes_per_key) != n:
        raise ValueError("%d keys but %d size lists" % (n, len(sizes_per_key)))
    iovs = (ctypes.POINTER(_ffi.Iovec) * n)()
    cnts = (ctypes.c_int * n)()
    keep = []
    for i, bufs in enumerate(bufs_per_key):
        sizes = sizes_per_key[i] if sizes_per_key is not None else [None] * len(bufs)
        if len(sizes) != len(bufs):
            raise ValueError("key %d: %d buffers but %d sizes" % (i, len(bufs), len(sizes)))
        arr = (_ffi.Iovec * max(len(bufs), 1))()
        for j, (b, s) in enumerate(zip(bufs, sizes)):
            addr, length, k = _buffer(b, s, writable)
            arr[j].iov_base = addr
            arr[j].iov_len = length
            keep.append(k)
        keep.append(arr)
        iovs[i] = ctypes.cast(arr, ctypes.POINTER(_ffi.Iovec))
        cnts[i] = len(bufs)
    return iovs, cnts, keep


def _in_slices(n, handle, run):
    """Per-key results of n keys run in slices of at most BATCH_MAX:
    run(off, end) gives (rc, results). A slice that fails as a whole gives
    its code to every key not yet done; no handle gives NOT_SET_UP."""
    if handle is None:
        return [NOT_SET_UP] * n
    out = []
    for off in range(0, n, _ffi.BATCH_MAX):
        end = min(n, off + _ffi.BATCH_MAX)
        rc, res = run(off, end)
        if rc < 0:
            return out + [rc] * (n - off)
        out.extend(res)
    return out


class Store:
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

    # --- lifecycle -----------------------------------------------------

    def setup(
        self,
        local_hostname=None,
        metadata_server=None,
        global_segment_size=0,
        local_buffer_size=0,
        protocol="tcp",
        rdma_devices="",
        master_server_address="",
        socket_path=None,
        tenant=None,
        timeout_ms=0,
    ):
        """Connect to the proxy at socket_path (None: $LUNAR_SOCKET, then the
        default path) as tenant (None: 'default'). The Mooncake arguments
        before socket_path belong to the proxy; they are logged and ignored.
        Returns 0 (also when already set up) or a code such as
        PROXY_UNAVAILABLE."""
        _log.info(
            "setup: local_hostname=%s metadata_server=%s global_segment_size=%s "
            "local_buffer_size=%s protocol=%s rdma_devices=%s master_server_address=%s "
            "are lunar-proxy settings; ignored here",
            local_hostname, metadata_server, global_segment_size, local_buffer_size,
            protocol, rdma_devices, master_server_address)
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
            return rc

    def init_all(self, protocol="tcp", device_name="", mount_segment_size=0):
        """Mooncake's init_all: connects with the defaults; arguments ignored."""
        return self.setup(protocol=protocol, rdma_devices=device_name,
                          global_segment_size=mount_segment_size)

    def close(self):
        """Close the connection and free alloc() memory: the views it handed
        out are released (using them raises ValueError). If a view is still
        exported (e.g. a numpy array over it), the memory stays mapped
        rather than pulled from under it, and a warning says so."""
        with self._lock:
            c, self._c = self._c, None
            allocs, self._allocs = self._allocs, {}
        if c is None:
            return
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
            return
        self._lib.lunar_close(c)

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
        return socket.gethostname()

    # --- puts --------------------------------------------------------------

    def put(self, key, value, config=None):
        """Store value (any bytes-like object) under key; 0 or a code. An
        existing key keeps its first value and returns 0."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        addr, n, keep = _buffer(value)
        cfg, ckeep = _cfg(config)
        rc = self._lib.lunar_put(c, _key(key), addr, n, cfg)
        del keep, ckeep
        return rc

    def upsert(self, key, value, config=None):
        """Store or replace key's value; 0 or a code."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        addr, n, keep = _buffer(value)
        cfg, ckeep = _cfg(config)
        rc = self._lib.lunar_upsert(c, _key(key), addr, n, cfg)
        del keep, ckeep
        return rc

    def put_from(self, key, buffer_ptr, size=None, config=None):
        """Mooncake's put_from: the value at a raw pointer (or buffer)."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        addr, n, keep = _buffer(buffer_ptr, size)
        cfg, ckeep = _cfg(config)
        rc = self._lib.lunar_put(c, _key(key), addr, n, cfg)
        del keep, ckeep
        return rc

    def batch_put_from(self, keys, buffer_ptrs, sizes=None, config=None):
        """Put keys[i] from buffer_ptrs[i] (int pointers with sizes, or buffer
        objects); a list of per-key codes."""
        bufs = [[b] for b in buffer_ptrs]
        lens = [[s] for s in sizes] if sizes is not None else None
        return self.batch_put_from_multi_buffers(keys, bufs, lens, config)

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes=None, config=None):
        """Put keys[i] gathered from the buffers all_buffer_ptrs[i] (sizes in
        all_sizes[i]); a list of per-key codes."""
        if len(all_buffer_ptrs) != len(keys):
            raise ValueError("%d keys but %d buffer lists" % (len(keys), len(all_buffer_ptrs)))
        cfg, ckeep = _cfg(config)
        return self._batch(keys, all_buffer_ptrs, all_sizes, False, ctypes.c_int,
                           lambda c, n, k, iovs, cnts, res:
                           self._lib.lunar_batch_put(c, n, k, iovs, cnts, cfg, res))

    # --- gets --------------------------------------------------------------

    def get(self, key):
        """The value as bytes; b'' when it cannot be read (missing, error)."""
        c = self._c
        if c is None:
            return b""
        k = _key(key)
        # A value replaced between the size and the read may have grown: retry.
        for _ in range(4):
            size = self._lib.lunar_get_size(c, k)
            if size <= 0:
                return b""
            buf = bytearray(size)
            view = (ctypes.c_char * size).from_buffer(buf)
            n = self._lib.lunar_get_into(c, k, ctypes.addressof(view), size)
            del view  # lets the bytearray be sliced below
            if n >= 0:
                return bytes(memoryview(buf)[:n])
            if n != BUFFER_OVERFLOW:
                return b""
        return b""

    def get_into(self, key, buffer, size=None):
        """Read key into a writable buffer (or an int pointer with size); the
        value's size, or a code (BUFFER_OVERFLOW when it does not fit)."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        addr, n, keep = _buffer(buffer, size, writable=True)
        rc = self._lib.lunar_get_into(c, _key(key), addr, n)
        del keep
        return rc

    def batch_get_into(self, keys, buffer_ptrs, sizes=None):
        """Read keys[i] into buffer_ptrs[i]; a list of sizes or codes."""
        bufs = [[b] for b in buffer_ptrs]
        lens = [[s] for s in sizes] if sizes is not None else None
        return self.batch_get_into_multi_buffers(keys, bufs, lens)

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes=None,
                                     prefer_same_node=True):
        """Read keys[i] scattered into all_buffer_ptrs[i] in order; a list of
        sizes or codes. prefer_same_node is Mooncake's and ignored (the
        proxy always prefers a local replica)."""
        if len(all_buffer_ptrs) != len(keys):
            raise ValueError("%d keys but %d buffer lists" % (len(keys), len(all_buffer_ptrs)))
        return self._batch(keys, all_buffer_ptrs, all_sizes, True, ctypes.c_int64,
                           self._lib.lunar_batch_get_into)

    def _batch(self, keys, bufs, sizes, writable, res_type, call):
        """Run call over keys in slices of BATCH_MAX; per-key results."""
        c = self._c

        def run(off, end):
            iovs, cnts, keep = _iov_arrays(bufs[off:end],
                                           sizes[off:end] if sizes is not None else None,
                                           writable)
            res = (res_type * (end - off))()
            rc = call(c, end - off, _keys(keys[off:end]), iovs, cnts, res)
            del keep
            return rc, res

        return _in_slices(len(keys), c, run)

    # --- queries and removal -------------------------------------------

    def is_exist(self, key):
        """1, 0, or a code."""
        c = self._c
        return NOT_SET_UP if c is None else self._lib.lunar_exists(c, _key(key))

    def batch_is_exist(self, keys):
        """A list of 1, 0 or a code per key."""
        c = self._c

        def run(off, end):
            res = (ctypes.c_int * (end - off))()
            return self._lib.lunar_batch_exists(c, end - off, _keys(keys[off:end]), res), res

        return _in_slices(len(keys), c, run)

    def get_size(self, key):
        """The value's size in bytes, or a code."""
        c = self._c
        return NOT_SET_UP if c is None else self._lib.lunar_get_size(c, _key(key))

    def remove(self, key, force=False):
        """0 or a code (OBJECT_HAS_LEASE while read recently, unless force)."""
        c = self._c
        return NOT_SET_UP if c is None else self._lib.lunar_remove(c, _key(key), int(bool(force)))

    def remove_by_regex(self, pattern, force=False):
        """Remove this tenant's keys matching a POSIX ERE; the count or a code."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        return self._lib.lunar_remove_by_regex(c, _key(pattern), int(bool(force)))

    def remove_all(self, force=False):
        """Remove every key of this tenant; the count or a code."""
        c = self._c
        return NOT_SET_UP if c is None else self._lib.lunar_remove_all(c, int(bool(force)))

    # --- memory ----------------------------------------------------------

    def register_buffer(self, buffer_ptr, size=None):
        """Share caller memory with the proxy for zero-copy calls; 0 or a code.

        Only sealed memfd memory can be shared; other memory is accepted as
        Mooncake accepts it (0) and works through the staging arena."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        addr, n, keep = _buffer(buffer_ptr, size, writable=True)
        rc = self._lib.lunar_register(c, addr, n)
        del keep
        return 0 if rc == INVALID_PARAMS else rc

    def unregister_buffer(self, buffer_ptr):
        """Stop sharing memory given to register_buffer; 0 or a code."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        addr = buffer_ptr if isinstance(buffer_ptr, int) else address_of(buffer_ptr)
        rc = self._lib.lunar_unregister(c, addr)
        return 0 if rc == INVALID_PARAMS else rc

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
