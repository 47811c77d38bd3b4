"""Mooncake's configuration objects for Lunar: ReplicateConfig and
SoftPinAction (the per-put placement and pinning request, turned into a
struct lunar_put_cfg), and the arguments of setup() in both of Mooncake's
forms (positional/keyword and a dict of strings), parsed and checked as
Mooncake checks them, then reduced to what a sidecar client uses.
"""

import ctypes
import enum
import logging
import os
import re
import socket

from . import _ffi
from ._args import INVALID_PARAMS, key_bytes

_log = logging.getLogger("lunar")

MIB = 1 << 20
# Mooncake's defaults and bounds (mooncake-store types.h).
DEFAULT_SEGMENT_SIZE = 16 * MIB
DEFAULT_LOCAL_BUFFER_SIZE = 16 * MIB
DEFAULT_MASTER = "127.0.0.1:50051"
DEFAULT_CLIENT_HTTP_PORT = 9300
MIN_SEGMENT_SIZE = 1024
MAX_SEGMENT_SIZE = 1 << 40
# Mooncake picks its transfer-engine port from this range when
# local_hostname names none; get_hostname() reports one from it too.
HOST_PORT_LO, HOST_PORT_HI = 12300, 14300
_U64_MAX = (1 << 64) - 1


class SoftPinAction(enum.IntEnum):
    """What a put or upsert does to the object's soft pin: PRESERVE keeps an
    existing one (none for a new object), ENABLE starts one (soft_pin_ttl_ms,
    or the master's default TTL), DISABLE removes it."""

    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ReplicateConfig:
    """Mooncake's ReplicateConfig. Fields Lunar acts on: replica_num,
    soft_pin_action and soft_pin_ttl_ms, with_hard_pin, preferred_segment
    and preferred_segments (segment names are proxies' "host:data-port").
    nof_replica_num and dfs_replica_num must stay 0 (Lunar has no NVMe-oF
    or DFS tier); prefer_alloc_in_same_node is accepted and ignored (the
    master's --allocation-strategy decides). with_soft_pin, from older
    Mooncake releases, reads and sets soft_pin_action."""

    def __init__(self, replica_num=1, with_soft_pin=False, with_hard_pin=False,
                 preferred_segments=None, preferred_segment="",
                 soft_pin_action=SoftPinAction.PRESERVE, soft_pin_ttl_ms=None):
        self.replica_num = replica_num
        self.soft_pin_action = SoftPinAction(soft_pin_action)
        if with_soft_pin:
            self.soft_pin_action = SoftPinAction.ENABLE
        self.soft_pin_ttl_ms = soft_pin_ttl_ms
        self.with_hard_pin = with_hard_pin
        self.preferred_segments = list(preferred_segments or [])
        self.preferred_segment = preferred_segment or ""
        self.nof_replica_num = 0
        self.dfs_replica_num = 0
        self.preferred_nof_segments = []
        self.prefer_alloc_in_same_node = False

    @property
    def soft_pin_ttl_ms(self):
        """None (the master's default TTL) or milliseconds, 0..2**64-1."""
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, value):
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or \
                    not 0 <= value <= _U64_MAX:
                raise TypeError("soft_pin_ttl_ms is None or an int in 0..2**64-1, not %r"
                                % (value,))
        self._soft_pin_ttl_ms = value

    @property
    def with_soft_pin(self):
        return self.soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, value):
        self.soft_pin_action = SoftPinAction.ENABLE if value else SoftPinAction.PRESERVE

    def __repr__(self):
        return ("ReplicateConfig(replica_num=%r, soft_pin_action=%s, soft_pin_ttl_ms=%r, "
                "with_hard_pin=%r, preferred_segment=%r, preferred_segments=%r)"
                % (self.replica_num, self.soft_pin_action.name, self.soft_pin_ttl_ms,
                   self.with_hard_pin, self.preferred_segment, self.preferred_segments))

    __str__ = __repr__


def put_cfg(config):
    """(struct lunar_put_cfg or None, keep-alive, code) from a
    ReplicateConfig, a dict with the same keys, any object with those
    attributes, or None (one replica, no pins). code is INVALID_PARAMS for
    a request Mooncake refuses too (a TTL without ENABLE) or Lunar cannot
    hold (NVMe-oF/DFS replicas, a TTL over 2**32-1 ms); else 0."""
    if config is None:
        return None, None, 0
    if isinstance(config, dict):
        def get(k, d):
            return config.get(k, d)
    else:
        def get(k, d):
            return getattr(config, k, d)
    action = get("soft_pin_action", None)
    if action is None:
        action = SoftPinAction.ENABLE if get("with_soft_pin", False) else SoftPinAction.PRESERVE
    action = SoftPinAction(action)
    ttl = get("soft_pin_ttl_ms", None)
    if ttl is not None and (action != SoftPinAction.ENABLE or not 0 <= ttl <= 0xFFFFFFFF):
        return None, None, INVALID_PARAMS
    if get("nof_replica_num", 0) or get("dfs_replica_num", 0):
        return None, None, INVALID_PARAMS
    segs = [s for s in list(get("preferred_segments", None) or []) if s]
    one = get("preferred_segment", None)
    if one:
        segs.insert(0, one)
    cfg = _ffi.LunarPutCfg()
    cfg.replica_num = int(get("replica_num", 1) or 1)
    # A zero TTL commits an ordinary, unpinned object (Mooncake's rule);
    # lunar_put_cfg's 0 would mean "the default TTL" instead.
    cfg.soft_pin = 1 if action == SoftPinAction.ENABLE and ttl != 0 else 0
    cfg.soft_pin_ttl_ms = int(ttl or 0)
    cfg.hard_pin = 1 if get("with_hard_pin", False) else 0
    keep = None
    if segs:
        keep = (ctypes.c_char_p * len(segs))(*[key_bytes(s) for s in segs])
        cfg.preferred_segments = keep
        cfg.preferred_count = len(segs)
    return cfg, keep, 0


# --- setup() arguments ---------------------------------------------------------

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "T": 1 << 40, "TB": 1 << 40}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(value):
    """Bytes from an int or a string such as "16MB", "16 MB", "1.5 GB",
    "1048576" or "infinite" (units K/KB, M/MB, G/GB, T/TB are powers of
    1024, as in Mooncake); None when it is not a size ("50%")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if value >= 0 else None
    s = str(value).strip()
    if s == "infinite":
        return _U64_MAX
    m = _SIZE_RE.match(s)
    if not m or m.group(2).upper() not in _UNITS:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def parse_bool(value, default):
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    _log.warning("setup: %r is not a boolean; using %s", value, default)
    return default


def parse_int(value):
    if isinstance(value, bool):
        return None
    try:
        return int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        return None


def sizes_ok(global_segment_size, local_buffer_size):
    """Mooncake's bounds: a segment 0 or at least 1 KiB; a local buffer 0
    or 1 KiB..1 TiB."""
    if global_segment_size is None or local_buffer_size is None:
        return False
    if global_segment_size and global_segment_size < MIN_SEGMENT_SIZE:
        return False
    if local_buffer_size and not MIN_SEGMENT_SIZE <= local_buffer_size <= MAX_SEGMENT_SIZE:
        return False
    return True


def from_dict(config):
    """setup(dict): the keyword arguments of the positional form, parsed
    from Mooncake's dict of strings; or INVALID_PARAMS as Mooncake returns
    for a missing local_hostname/metadata_server or a bad size or port."""
    get = config.get
    host, meta = get("local_hostname"), get("metadata_server")
    if not host or not meta:
        _log.error("setup: local_hostname and metadata_server are required")
        return INVALID_PARAMS
    out = {
        "local_hostname": str(host),
        "metadata_server": str(meta),
        "global_segment_size": parse_size(get("global_segment_size", DEFAULT_SEGMENT_SIZE)),
        "local_buffer_size": parse_size(get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)),
        "protocol": str(get("protocol", "tcp")),
        "rdma_devices": str(get("rdma_devices", "")),
        "master_server_addr": str(get("master_server_addr", DEFAULT_MASTER)),
        "enable_ssd_offload": parse_bool(get("enable_ssd_offload", False), False),
        "ssd_offload_path": str(get("ssd_offload_path", "")),
        "tenant_id": str(get("tenant_id", "default")),
        "enable_client_http_server": parse_bool(get("enable_client_http_server", False), False),
        "client_http_port": parse_int(get("client_http_port", DEFAULT_CLIENT_HTTP_PORT)),
    }
    for name in ("global_segment_size", "local_buffer_size"):
        if out[name] is None:
            _log.error("setup: %s=%r is not a size", name, get(name))
            return INVALID_PARAMS
    if out["client_http_port"] is None:
        _log.error("setup: client_http_port=%r is not an integer", get("client_http_port"))
        return INVALID_PARAMS
    # Lunar's own keys, for a dict that carries them.
    for name in ("socket_path", "tenant", "timeout_ms"):
        if name in config:
            out[name] = config[name]
    if "timeout_ms" in out and parse_int(out["timeout_ms"]) is None:
        return INVALID_PARAMS
    ignored = sorted(set(config) - set(out) - {"ipc_socket_path"})
    if ignored:
        _log.info("setup: unknown keys ignored: %s", ", ".join(map(str, ignored)))
    return out


def hostname_with_port(local_hostname):
    """What get_hostname() reports: local_hostname (default: this host's
    name) with its ":port"; when it names none, a port from Mooncake's
    12300..14300 fixed per process. It names this client only: nothing
    listens on that port, and data lives in the proxy's segment."""
    host = local_hostname or socket.gethostname()
    tail = host.rsplit(":", 1)[-1]
    if tail.isdigit() and (host.count(":") == 1 or (host.startswith("[") and "]:" in host)):
        return host
    port = HOST_PORT_LO + os.getpid() % (HOST_PORT_HI - HOST_PORT_LO + 1)
    return "%s:%d" % (host, port)
