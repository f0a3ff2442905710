"""`cloudnet-netavark`: a netavark plugin (podman 5's network backend; plugin API 1.0.0) that gives a container's
namespace a cloudnet instance, as `cloudnet-cni` does for CNI runtimes.

Only the runtime's side is its own (what netavark passes in, what it expects back); the attachments, their
instance names, the HTTP client and the namespace checks are cloudnet-cni's modules, shared.
"""
