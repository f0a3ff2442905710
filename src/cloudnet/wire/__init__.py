"""Small protocol modules both the control plane and the host side use (HTTP/1, signing, SmartOS mdata)."""
