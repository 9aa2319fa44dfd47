"""The cascade as a plug-in: built from the `cascade:` section and wired through the ports.

The composition root (`sidecar/server.py`) calls `install_cascade`; nothing else in the
sidecar imports the cascade.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cascadebreaker.sidecar.mesh.node import CascadeNode
    from cascadebreaker.sidecar.proxy.ports import PluginHost

__all__ = ["PLUGIN_NAME", "cascade_node", "install_cascade"]

PLUGIN_NAME = "cascade"


def install_cascade(host: PluginHost) -> CascadeNode | None:
    """Build the cascade from `cascade:` in the config and plug it in (None when disabled)."""
    config = host.config.cascade  # validated with the rest of the file
    if not config.enabled:
        return None
    from cascadebreaker.sidecar.mesh.admin import CascadeCollector, availability_route
    from cascadebreaker.sidecar.mesh.hook import CascadeHook, sealed_refusal_trust
    from cascadebreaker.sidecar.mesh.node import CascadeNode

    node = CascadeNode(host, config)
    templates = node.templates
    host.route_resolver = lambda service, method, path: (
        templates.endpoint(service, method, path).template
    )
    host.hooks.add(CascadeHook(node))
    if node.secret is not None:
        host.refusal_trust = sealed_refusal_trust(node.secret)
    host.admin_routes["/availability"] = availability_route(node)
    host.status_sections["cascade"] = node.status
    host.collectors.append(CascadeCollector(node))
    host.availability = node.table  # the gRPC API's Check and Watch read these
    host.update_source = node.hub.source
    host.edges_to = node.edges_to
    host.plugins[PLUGIN_NAME] = node
    node.start()
    return node


def cascade_node(host: PluginHost) -> CascadeNode | None:
    """The cascade plugged into `host`, if any."""
    from cascadebreaker.sidecar.mesh.node import CascadeNode

    node = host.plugins.get(PLUGIN_NAME)
    return node if isinstance(node, CascadeNode) else None
