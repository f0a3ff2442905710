"""SR-IOV: direct ports plugged as VFs (driver.py: a port binder another driver composes, dataplane.base.PortBinder)
and the host's VF inventory read from sysfs (inventory.py, reported with the agent's heartbeat)."""
