"""Lunar's Python client: ctypes over liblunar, no compiled extension.

``Store`` has the methods of Mooncake's ``MooncakeDistributedStore``, with
Mooncake's argument names, defaults and return conventions, so connectors
written for Mooncake port by changing the import (or unchanged, through the
``mooncake.store`` module of python/mooncake-compat). Like Mooncake, calls
return ints (0 or a count/size on success, a negative code from SPEC
section 9 on failure) rather than raising; ``get`` returns ``b''`` when the
key cannot be read; batch calls give per-key codes, also for lists of
different lengths. Wrong argument types raise ``TypeError``/``ValueError``.

The store is the node's lunar-proxy: ``setup`` connects to it over its UNIX
socket, and Mooncake's resource arguments (segment sizes, protocol, devices,
master address, SSD offload, HTTP port) are the proxy's configuration,
checked, logged and not acted on here.
"""

from . import _ffi
from ._args import (BUFFER_OVERFLOW, INTERNAL_ERROR, INVALID_KEY, INVALID_PARAMS,
                    NO_AVAILABLE_HANDLE, NOT_SET_UP, OBJECT_ALREADY_EXISTS, OBJECT_HAS_LEASE,
                    OBJECT_NOT_FOUND, OK, PROXY_UNAVAILABLE, UNAVAILABLE_IN_CURRENT_STATUS,
                    address_of)
from ._extras import BufferHandle, ReplicaDescriptor, ReplicaStatus
from .config import ReplicateConfig, SoftPinAction
from .memory import HostMemAllocator, MooncakeHostMemAllocator
from .store import MooncakeDistributedStore, Store

__all__ = [
    "Store",
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "SoftPinAction",
    "BufferHandle",
    "ReplicaDescriptor",
    "ReplicaStatus",
    "HostMemAllocator",
    "MooncakeHostMemAllocator",
    "strerror",
    "error_detail",
    "address_of",
]


def strerror(code):
    """lunar_strerror's name for code (e.g. 'OBJECT_NOT_FOUND')."""
    return _ffi.lib().lunar_strerror(int(code)).decode()


def error_detail():
    """What the proxy said beyond the code about this thread's last call
    (lunar_error_detail): why a put of a value larger than every segment
    got NO_AVAILABLE_HANDLE; '' when it said nothing."""
    return _ffi.lib().lunar_error_detail().decode()
