"""``ray._private.services.get_node_ip_address`` (where frameworks import it from)."""

from troupe.ray.util import get_node_ip_address

__all__ = ["get_node_ip_address"]
