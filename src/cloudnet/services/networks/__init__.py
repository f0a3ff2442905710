"""Networks, subnets and their addresses (IPAM), routers and their routes."""
