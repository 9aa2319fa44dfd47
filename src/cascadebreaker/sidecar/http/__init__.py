"""The HTTP/1.1 layer: wire helpers, body framing (pure), server connections, limits, tunnels.

    wire.py        header kinds, hop-by-hop rules, heads, JSON replies
    kind_cache.py  header kinds by raw spelling (the interpreted build's per-header path)
    framing.py     body framing and smuggling rules, decided in one place (sans-I/O)
    exchange.py    RequestHead, and the Exchange / RequestHandler / TunnelEnd interfaces
    connection.py  ServerConnection: an asyncio.Protocol over httptools
    limits.py      Limits, ConnectionTracker (timeouts, connection cap, draining)
    tunnel.py      a WebSocket after its 101: two connections joined

Knows nothing of upstreams, breakers or the cascade.
"""
