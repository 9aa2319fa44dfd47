"""The sidecar: the network process beside a service, in layers (each imports only those below).

    config, logs    the config as plain classes; rate-limited logging
    http/           HTTP/1.1: wire, pure body framing, request reader, server connections
    upstream/       keep-alive connections, pools and a client; the UpstreamError tree
    proxy/          the one call pipeline, its HTTP and async drivers, listeners, the runtime
    grpc/, admin    the gRPC API and its client; the admin listener
    mesh/           the cascade, plugged in through the proxy's hook ports
    schema          the YAML validated with pydantic (before the serving process starts)
    server, serve   the composition root; the serving process `ccb sidecar` execs
    command         `ccb sidecar`: validate, then exec `serve`

The contracts are checked by import-linter (`[tool.importlinter]` in pyproject.toml).
"""
