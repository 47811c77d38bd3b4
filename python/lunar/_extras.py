"""The rest of Mooncake's MooncakeDistributedStore surface, composed from
the core Store calls (store.py): multi-part and batch puts of Python
buffers, reads into new buffers (BufferHandle), ranged reads, batch removal,
replica descriptors, and the setup forms without arguments of their own.
Nothing here talks to liblunar except through the core methods.
"""

import ctypes
import enum
import logging

from . import _ffi, config as _config
from ._args import (BUFFER_OVERFLOW, INVALID_PARAMS, NOT_SET_UP, OBJECT_NOT_FOUND, buffer_arg,
                    key_bytes)

_log = logging.getLogger("lunar")


class BufferHandle(bytearray):
    """A value read by get_buffer/batch_get_buffer: a bytearray (so the
    buffer protocol, memoryview, bytes(), torch.frombuffer work) with
    Mooncake's ptr() and size()."""

    def ptr(self):
        """The address of the first byte (valid while the handle lives and
        is not resized)."""
        if not len(self):
            return 0
        view = (ctypes.c_char * len(self)).from_buffer(self)
        addr = ctypes.addressof(view)
        del view
        return addr

    def size(self):
        return len(self)


class ReplicaStatus(enum.IntEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class ReplicaDescriptor:
    """What batch_get_replica_desc can say about a replica through the
    sidecar: that a readable one exists (status COMPLETE). Where it lives
    (memory or disk tier, which segment) is the proxy's business and not
    visible to the client, so is_memory_replica() and is_disk_replica()
    both answer False ("unknown")."""

    def __init__(self, status=ReplicaStatus.COMPLETE):
        self.status = status

    def is_memory_replica(self):
        return False

    def is_disk_replica(self):
        return False

    def is_local_disk_replica(self):
        return False

    def __repr__(self):
        return "ReplicaDescriptor(status=%s, tier=unknown)" % self.status.name


def _ranges_shape(keys, dsts, srcs, sizes):
    """Per key j of one buffer: None when its three fragment lists line
    up, else how many result slots its code fills."""
    out = []
    for j in range(len(keys)):
        try:
            lens = (len(dsts[j]), len(srcs[j]), len(sizes[j]))
        except (IndexError, TypeError):
            out.append(1)
            continue
        out.append(None if lens[0] == lens[1] == lens[2] else max(max(lens), 1))
    return out


class MooncakeMethods:
    """Mixin for Store: Mooncake methods built from the core calls."""

    # --- setup forms -------------------------------------------------------

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        """Mooncake's "dummy client" of a standalone store process. Lunar's
        proxy is that process, so this is setup() with its defaults:
        server_address, mem_pool_size and local_buffer_size are logged."""
        _log.info("setup_dummy: mem_pool_size=%s local_buffer_size=%s server_address=%s; "
                  "connecting to the node's lunar-proxy", mem_pool_size, local_buffer_size,
                  server_address)
        return self.setup(local_buffer_size=local_buffer_size)

    def init_all(self, protocol="tcp", device_name="", mount_segment_size=16 << 20):
        """Mooncake's init_all: setup() with the defaults; arguments logged."""
        return self.setup(protocol=protocol, rdma_devices=device_name,
                          global_segment_size=mount_segment_size)

    # --- puts of Python buffers --------------------------------------------

    def put_parts(self, key, *parts, config=None):
        """Store the concatenation of parts (bytes-like) as one value,
        without joining them first; 0 or a code."""
        c = self._c
        if c is None:
            return NOT_SET_UP
        if not parts:
            return INVALID_PARAMS
        if len(parts) > _ffi.IOV_MAX:
            return self.put(key, b"".join(bytes(memoryview(p)) for p in parts), config)
        cfg, ckeep, rc = _config.put_cfg(config)
        if rc:
            return rc
        iov = (_ffi.Iovec * len(parts))()
        keep = []
        for i, p in enumerate(parts):
            addr, n, k = buffer_arg(p)
            iov[i].iov_base, iov[i].iov_len = addr, n
            keep.append(k)
        rc = self._lib.lunar_putv(c, key_bytes(key), iov, len(parts), cfg)
        del keep, ckeep
        return rc

    def upsert_parts(self, key, *parts, config=None):
        """upsert the concatenation of parts; 0 or a code. (One copy: the
        library has no gathering upsert.)"""
        if not parts:
            return INVALID_PARAMS if self._c is not None else NOT_SET_UP
        return self.upsert(key, b"".join(bytes(memoryview(p)) for p in parts), config)

    def put_batch(self, keys, values, config=None):
        """Store values[i] under keys[i]; 0 when every key is stored, else
        the first failing key's code (INVALID_PARAMS for lists of different
        lengths)."""
        if len(values) != len(keys):
            return INVALID_PARAMS
        res = self.batch_put_from_multi_buffers(keys, [[v] for v in values], None, config)
        return next((r for r in res if r != 0), 0)

    def upsert_batch(self, keys, values, config=None):
        """upsert values[i] under keys[i]; 0 or the first failing code."""
        if len(values) != len(keys):
            return INVALID_PARAMS
        for k, v in zip(keys, values):
            rc = self.upsert(k, v, config)
            if rc:
                return rc
        return 0

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        """upsert keys[i] from buffer_ptrs[i] (sizes[i] bytes); per-key codes."""
        if len(buffer_ptrs) != len(keys) or len(sizes) != len(keys):
            return [INVALID_PARAMS] * len(keys)
        return [self.upsert_from(k, p, s, config) for k, p, s in zip(keys, buffer_ptrs, sizes)]

    # --- reads into new buffers --------------------------------------------

    def get_batch(self, keys):
        """The values of keys as bytes; b'' for a key that cannot be read."""
        return [bytes(b) if b is not None else b"" for b in self.batch_get_buffer(keys)]

    def get_buffer(self, key):
        """The value as a BufferHandle, or None when it cannot be read."""
        buf = self._read(key)
        return BufferHandle(buf) if isinstance(buf, bytearray) else None

    def batch_get_buffer(self, keys):
        """A BufferHandle per key, None for a key that cannot be read. The
        sizes come one round trip per key (the library has no batch size
        query), the values in one batch read."""
        if self._c is None:
            return [None] * len(keys)
        sizes = [self.get_size(k) for k in keys]
        out = [None] * len(keys)
        want = [i for i, s in enumerate(sizes) if s > 0]
        if not want:
            return out
        bufs = [BufferHandle(sizes[i]) for i in want]
        res = self.batch_get_into([keys[i] for i in want], bufs)
        for i, b, r in zip(want, bufs, res):
            if r == BUFFER_OVERFLOW:  # replaced by a larger value meanwhile
                out[i] = self.get_buffer(keys[i])
            elif r >= 0:
                del b[r:]
                out[i] = b
        return out

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                        all_sizes):
        """Copy byte ranges of objects into registered buffers:
        results[i][j][k] is the bytes copied for fragment k of key j into
        buffer i, from all_src_offsets[i][j][k] of the object to
        all_dst_offsets[i][j][k] of buffer_ptrs[i], or a code:
        INVALID_PARAMS for lists that do not line up, a range outside the
        object, or a destination outside register_buffer()/alloc() memory;
        the read's code for a missing key. Each key is read once, whole."""
        nb = len(buffer_ptrs)
        top_ok = len(all_keys) == len(all_dst_offsets) == len(all_src_offsets) == \
            len(all_sizes) == nb
        results = []
        plans = []
        for i in range(len(all_keys)):
            keys = all_keys[i]
            if not top_ok:
                results.append([[INVALID_PARAMS] for _ in keys])
                continue
            shape = _ranges_shape(keys, all_dst_offsets[i], all_src_offsets[i], all_sizes[i])
            row = []
            for j, bad in enumerate(shape):
                if bad is not None:
                    row.append([INVALID_PARAMS] * bad)
                    continue
                row.append([0] * len(all_sizes[i][j]))
                plans.append((i, j))
            results.append(row)
        values = {}
        for i, j in plans:
            if not all_sizes[i][j]:
                continue
            key = all_keys[i][j]
            if key not in values:
                values[key] = self._read(key)
            value = values[key]
            for k, (dst, src, n) in enumerate(zip(all_dst_offsets[i][j], all_src_offsets[i][j],
                                                  all_sizes[i][j])):
                results[i][j][k] = self._copy_range(value, buffer_ptrs[i], dst, src, n)
        return results

    def _copy_range(self, value, base, dst, src, n):
        """Copy value[src:src+n] to base+dst; n or a code."""
        if not isinstance(value, bytearray):
            return value if value < 0 else OBJECT_NOT_FOUND
        if min(dst, src, n) < 0 or src + n > len(value):
            return INVALID_PARAMS
        if not self._registered(base + dst, n):
            return INVALID_PARAMS
        if n:
            src_view = (ctypes.c_char * n).from_buffer(value, src)
            ctypes.memmove(base + dst, src_view, n)
            del src_view
        return n

    # --- removal and replicas ----------------------------------------------

    def batch_remove(self, keys, force=False):
        """remove() each key; a list of 0 or a code per key."""
        return [self.remove(k, force) for k in keys]

    def get_replica_desc(self, key):
        """[ReplicaDescriptor] when key has a readable value, [] when it has
        none (or on error)."""
        return self.batch_get_replica_desc([key]).get(key, [])

    def batch_get_replica_desc(self, keys):
        """{key: [ReplicaDescriptor]} for the keys that exist; keys that do
        not exist map to []. One batch existence query."""
        return {k: ([ReplicaDescriptor()] if r == 1 else [])
                for k, r in zip(keys, self.batch_is_exist(keys))}

    def alloc_from_mem_pool(self, size):
        """Mooncake's allocation from the client's buffer: the address of
        alloc(size) memory (zero copy, freed by free(address) or close()),
        or 0."""
        mv = self.alloc(size)
        if mv is None:
            return 0
        return next(p for p, v in list(self._allocs.items()) if v is mv)
