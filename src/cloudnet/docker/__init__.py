"""Docker's remote network and IPAM driver (libnetwork's plugin protocol), a thin face over cloudnet's API.

An entry point, like cli/: it speaks HTTP to the API with a token of its own (normally the `service` role of the
project the host's containers belong to) and never imports the control plane or the host side. Docker networks
become cloudnet networks and subnets, endpoints become cloudnet ports, and a sandbox joining an endpoint becomes a
cloudnet instance bound to that port, plugged by the host's agent exactly as any instance is (sandbox.py).
"""
