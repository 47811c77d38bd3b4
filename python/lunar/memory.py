"""HostMemAllocator (Mooncake's MooncakeHostMemAllocator): host memory that
the proxy can reach without a copy, from lunar_alloc. SGLang allocates its
host KV pool with it and then passes the pool to register_buffer, which
shares it with the Store's session: puts and gets in it are zero copy.
"""

import ctypes
import logging
import threading

from . import _ffi

_log = logging.getLogger("lunar")


class HostMemAllocator:
    """alloc(size) -> address (int, 0 on failure), free(address) -> 0 or a
    code. The memory comes from a session of its own with the node's proxy
    (socket_path, else $LUNAR_SOCKET, else the default path), opened on the
    first alloc. It stays mapped until free(); when the allocator is
    collected with blocks still allocated, its session (and so the memory)
    is kept until the process exits rather than pulled from under tensors
    that may still use it."""

    def __init__(self, socket_path=None, tenant=None):
        self._lib = _ffi.lib()
        self._socket_path = socket_path
        self._tenant = tenant
        self._c = None
        self._live = set()
        self._lock = threading.Lock()

    def _client(self):
        if self._c is None:
            opts = _ffi.LunarOpts()
            if self._socket_path:
                opts.socket_path = self._socket_path.encode()
            if self._tenant:
                opts.tenant = self._tenant.encode()
            out = ctypes.c_void_p()
            rc = self._lib.lunar_connect(ctypes.byref(opts), ctypes.byref(out))
            if rc:
                _log.error("HostMemAllocator: cannot reach the proxy: %s",
                           self._lib.lunar_strerror(rc).decode())
                return None
            self._c = out.value
        return self._c

    def alloc(self, size):
        """The address of size bytes of shared host memory, or 0."""
        with self._lock:
            c = self._client()
            if c is None or size <= 0:
                return 0
            ptr = self._lib.lunar_alloc(c, int(size)) or 0
            if ptr:
                self._live.add(ptr)
            return ptr

    def free(self, ptr):
        """Give back memory from alloc(); 0, or INVALID_PARAMS (-600) for an
        address alloc() did not return."""
        with self._lock:
            if ptr not in self._live:
                return -600
            self._live.discard(ptr)
            self._lib.lunar_free(self._c, ptr)
            return 0

    def __del__(self):
        try:
            if self._c is not None and not self._live:
                self._lib.lunar_close(self._c)
                self._c = None
        except Exception:
            pass


MooncakeHostMemAllocator = HostMemAllocator
