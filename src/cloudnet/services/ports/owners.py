"""Device owners that give a port its meaning to cloudnet (Neutron's constants), in a module of their own so that
any service may name them without importing the services that enforce who may set them (port_policy)."""

from __future__ import annotations

ROUTER_INTERFACE = "network:router_interface"
ROUTER_GATEWAY = "network:router_gateway"
