"""`cloudnet-cni`: a CNI plugin (spec 1.0 and 1.1) that gives a container's namespace a cloudnet instance.

An entry point like cli/: it talks HTTP to the instance API (the service role names the runtime's namespace) and
adds no second way to plug a device; the host's agent plugs the instance as it plugs any other.
"""
