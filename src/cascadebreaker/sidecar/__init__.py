"""The sidecar: the network process beside a service, in layers (each imports only those below).

    config, logs    the YAML's models; rate-limited logging
    http/           HTTP/1.1: wire, pure body framing, request reader, server connections
    upstream/       keep-alive connections, pools and a client; the UpstreamError tree
    proxy/          the one call pipeline, its HTTP and async drivers, listeners, the runtime
    grpc/, admin    the gRPC API and its client; the admin listener
    mesh/           the cascade, plugged in through the proxy's hook ports
    server, command the composition root; `ccb sidecar`

The contracts are checked by import-linter (`[tool.importlinter]` in pyproject.toml).
"""
