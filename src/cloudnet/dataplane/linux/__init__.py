"""Linux dataplane: network namespaces, veth pairs, bridges (pyroute2) and nftables (libnftables)."""
