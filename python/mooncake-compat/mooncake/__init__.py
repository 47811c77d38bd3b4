"""Mooncake's `mooncake` package name, provided by Lunar: only the store
module (`mooncake.store`) exists here, backed by the `lunar` package and the
node's lunar-proxy. The transfer engine and Mooncake's other modules are
not provided."""
