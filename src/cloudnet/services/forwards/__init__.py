"""External addresses: network forwards, floating IPs and their port forwardings, uplinks."""
