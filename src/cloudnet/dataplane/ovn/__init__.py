"""The OVN dataplane driver: a chassis' side of OVN (dataplane.base's interface). OVN realises L2, L3, NAT and
security groups from the NB rows the server writes; this driver plugs instances into br-int, gives each network
with a VIF here its metadata localport, and reports a port ACTIVE once ovn-controller has bound it (SB)."""
