"""The OVN northbound writer: what cloudnet's database implies for OVN's NB database (desired.py), one diff and
repair of the NB rows cloudnet owns per transaction (apply.py), and the server's thread that follows the store's
change feed and resyncs on start and reconnect (sync.py)."""
