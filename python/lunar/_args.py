"""Argument conversion shared by the Store methods: keys, buffers (raw
pointers or buffer objects), iovec arrays for batches, and the error codes
the Python layer returns itself.
"""

import ctypes

from . import _ffi

# Error codes (lunar.h: Mooncake's numbering plus the sidecar's own).
OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
NO_AVAILABLE_HANDLE = -200
INVALID_KEY = -400
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
UNAVAILABLE_IN_CURRENT_STATUS = -1010
PROXY_UNAVAILABLE = -2000
# What a call on a Store that is not set up (or is closed) returns, as
# Mooncake's C API does for a NULL handle.
NOT_SET_UP = -1


def key_bytes(key):
    """key as bytes; TypeError for a non-string, ValueError for a NUL."""
    if isinstance(key, str):
        key = key.encode()
    elif not isinstance(key, (bytes, bytearray)):
        raise TypeError("a key is str or bytes, not %s" % type(key).__name__)
    if b"\0" in key:
        raise ValueError("a key cannot contain NUL")
    return bytes(key)


def key_array(keys):
    """A char *[] of keys (the array keeps the bytes alive)."""
    enc = [key_bytes(k) for k in keys]
    return (ctypes.c_char_p * len(enc))(*enc)


def buffer_arg(buf, size=None, writable=False):
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
    return buffer_arg(buf, writable=True)[0]


def iov_shape_ok(bufs, sizes):
    """Whether one key's buffer list and size list (None: sizes from the
    buffer objects) line up."""
    try:
        return sizes is None or len(sizes) == len(bufs)
    except TypeError:
        return False


def iov_arrays(bufs_per_key, sizes_per_key, writable):
    """Per-key iovec arrays for a batch whose shapes were checked:
    (iovs, counts, keep-alive)."""
    n = len(bufs_per_key)
    iovs = (ctypes.POINTER(_ffi.Iovec) * n)()
    cnts = (ctypes.c_int * n)()
    keep = []
    for i, bufs in enumerate(bufs_per_key):
        sizes = sizes_per_key[i] if sizes_per_key is not None else [None] * len(bufs)
        arr = (_ffi.Iovec * max(len(bufs), 1))()
        for j, (b, s) in enumerate(zip(bufs, sizes)):
            addr, length, k = buffer_arg(b, s, writable)
            arr[j].iov_base = addr
            arr[j].iov_len = length
            keep.append(k)
        keep.append(arr)
        iovs[i] = ctypes.cast(arr, ctypes.POINTER(_ffi.Iovec))
        cnts[i] = len(bufs)
    return iovs, cnts, keep


def in_slices(n, handle, run):
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
