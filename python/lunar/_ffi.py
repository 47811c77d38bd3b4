"""ctypes bindings for liblunar's public C API (shmlib/include/lunar.h).

Finds liblunar.so, declares the prototypes once, and mirrors the structs of
lunar.h. Nothing here is compiled; the layouts below must match lunar.h.
"""

import ctypes
import ctypes.util
import os
import threading

# Limits from lunar.h.
KEY_MAX = 4096
BATCH_MAX = 1024
IOV_MAX = 64


class LunarOpts(ctypes.Structure):
    """struct lunar_opts."""

    _fields_ = [
        ("socket_path", ctypes.c_char_p),
        ("tenant", ctypes.c_char_p),
        ("timeout_ms", ctypes.c_uint),
        ("arena_bytes", ctypes.c_size_t),
    ]


class LunarPutCfg(ctypes.Structure):
    """struct lunar_put_cfg."""

    _fields_ = [
        ("replica_num", ctypes.c_uint),
        ("soft_pin", ctypes.c_int),
        ("soft_pin_ttl_ms", ctypes.c_uint),
        ("hard_pin", ctypes.c_int),
        ("preferred_segments", ctypes.POINTER(ctypes.c_char_p)),
        ("preferred_count", ctypes.c_uint),
    ]


class Iovec(ctypes.Structure):
    """struct iovec."""

    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_c = ctypes
_vp = _c.c_void_p
_cp = _c.c_char_p
_PROTOS = {
    "lunar_connect": (_c.c_int, [_c.POINTER(LunarOpts), _c.POINTER(_vp)]),
    "lunar_close": (None, [_vp]),
    "lunar_put": (_c.c_int, [_vp, _cp, _vp, _c.c_size_t, _c.POINTER(LunarPutCfg)]),
    "lunar_upsert": (_c.c_int, [_vp, _cp, _vp, _c.c_size_t, _c.POINTER(LunarPutCfg)]),
    "lunar_putv": (_c.c_int, [_vp, _cp, _c.POINTER(Iovec), _c.c_int, _c.POINTER(LunarPutCfg)]),
    "lunar_get_into": (_c.c_int64, [_vp, _cp, _vp, _c.c_size_t]),
    "lunar_getv": (_c.c_int64, [_vp, _cp, _c.POINTER(Iovec), _c.c_int]),
    "lunar_get_size": (_c.c_int64, [_vp, _cp]),
    "lunar_exists": (_c.c_int, [_vp, _cp]),
    "lunar_remove": (_c.c_int, [_vp, _cp, _c.c_int]),
    "lunar_remove_all": (_c.c_int64, [_vp, _c.c_int]),
    "lunar_remove_by_regex": (_c.c_int64, [_vp, _cp, _c.c_int]),
    "lunar_batch_put": (
        _c.c_int,
        [
            _vp,
            _c.c_size_t,
            _c.POINTER(_cp),
            _c.POINTER(_c.POINTER(Iovec)),
            _c.POINTER(_c.c_int),
            _c.POINTER(LunarPutCfg),
            _c.POINTER(_c.c_int),
        ],
    ),
    "lunar_batch_get_into": (
        _c.c_int,
        [
            _vp,
            _c.c_size_t,
            _c.POINTER(_cp),
            _c.POINTER(_c.POINTER(Iovec)),
            _c.POINTER(_c.c_int),
            _c.POINTER(_c.c_int64),
        ],
    ),
    "lunar_batch_exists": (
        _c.c_int,
        [_vp, _c.c_size_t, _c.POINTER(_cp), _c.POINTER(_c.c_int)],
    ),
    "lunar_prefix_match": (_c.c_int64, [_vp, _c.c_size_t, _c.POINTER(_cp)]),
    "lunar_alloc": (_vp, [_vp, _c.c_size_t]),
    "lunar_free": (None, [_vp, _vp]),
    "lunar_register": (_c.c_int, [_vp, _vp, _c.c_size_t]),
    "lunar_unregister": (_c.c_int, [_vp, _vp]),
    "lunar_health": (_c.c_int, [_vp]),
    "lunar_strerror": (_cp, [_c.c_int]),
    "lunar_error_detail": (_cp, []),
}

_lib = None
_lock = threading.Lock()


def _candidates():
    """Where liblunar.so may be, in order of preference."""
    env = os.environ.get("LUNAR_LIB")
    if env:
        return [env]
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    out = []
    build = os.environ.get("BUILD")
    if build:
        out.append(os.path.join(repo, build, "lib", "liblunar.so"))
    out.append(os.path.join(repo, "build", "lib", "liblunar.so"))
    found = ctypes.util.find_library("lunar")
    if found:
        out.append(found)
    return out


def lib():
    """The loaded liblunar with its prototypes declared; loads it on first
    use. Raises OSError naming every place looked at when it is missing."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(path + " (missing)")
                continue
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            for name, (restype, argtypes) in _PROTOS.items():
                fn = getattr(handle, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib = handle
            return _lib
        raise OSError(
            "liblunar.so not found; set LUNAR_LIB to its path. Tried: "
            + ("; ".join(tried) or "find_library('lunar') found nothing")
        )


# A writable memoryview over raw memory, with format 'B' (ctypes arrays give
# '<B', which memoryview cannot cast). CPython only.
_from_memory = ctypes.pythonapi.PyMemoryView_FromMemory
_from_memory.restype = ctypes.py_object
_from_memory.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
_PyBUF_WRITE = 0x200


def memoryview_at(ptr, size):
    """A writable memoryview of size bytes at ptr; it owns nothing."""
    return _from_memory(ptr, size, _PyBUF_WRITE)
