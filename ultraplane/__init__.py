"""Ultraplane: topology-aware gang scheduling onto AWS Trainium UltraServers.

The packages directly under `ultraplane` are the pure core (hardware profiles,
topology, allocator). The adapters `ultraplane.operator`, `ultraplane.api` and
`ultraplane.simulator` depend on the core, never the reverse.
"""

__version__ = "0.1.0"
