"""Ports: creation, policy, views, the compute and metadata ports, device owners, SR-IOV VF reservations."""
