"""QoS policies and rules (Neutron's qos extensions), and what a host enforces of them."""
