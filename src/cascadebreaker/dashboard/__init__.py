"""`ccb dashboard`: aggregates sidecars (admin API, Watch streams, Redis pub/sub) and serves the
live dependency graph, breaker states and cause chains to a browser over Server-Sent Events.

Modules, from pure to I/O: `model` (the dashboard's own types), `adapter` (every sidecar
spelling read in one place), `fleet` (the aggregated state) and `views` (what it means for the
page), `picture` (the page's document), `sources`, `collectors` (HTTP, gRPC and Redis I/O),
`aggregator`, `server`, `command`.
"""
