"""The agent's metadata side: the 169.254.169.254 proxy (proxy, guest, relay, upstream, ratelimit) and the
SmartOS metadata sockets and VM serial ports (mdata_service, mdata_connection, mdata_serial, mdata_sockets,
keyspace). Imports only cloudnet.wire and agent-side modules, never the metadata API server (cloudnet.metadata)."""
