"""Port pools: ports pre-created per host and network, claimed, refilled, recovered."""
