"""`mooncake.store` backed by Lunar: MooncakeDistributedStore and the types
that come with it, with Mooncake's names, arguments and return codes.
`setup()` connects to the node's lunar-proxy ($LUNAR_SOCKET or the default
socket); see python/README.md for what each Mooncake argument means here.
"""

from lunar import (BufferHandle, MooncakeDistributedStore, MooncakeHostMemAllocator,
                   ReplicaDescriptor, ReplicaStatus, ReplicateConfig, SoftPinAction)

__all__ = [
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "SoftPinAction",
    "MooncakeHostMemAllocator",
    "BufferHandle",
    "ReplicaDescriptor",
    "ReplicaStatus",
]
