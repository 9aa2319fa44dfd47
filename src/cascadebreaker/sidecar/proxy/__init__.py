"""The proxy: one call pipeline that decides, and the drivers that carry its decisions out.

pipeline.py     CallPipeline: hooks and reroute, admission, classify, record, stats,
                replay and retry (with the retry budget)
exchange.py     ProxyExchange: the HTTP driver (callbacks, streaming both ways)
call.py         the async driver: `SidecarRuntime.call`, behind the gRPC `Call`
hooks.py        the hook port: RequestHook, RequestInfo, Rejection, HookChain
ports.py        what a plug-in sees (PluginHost) and the views the gRPC API reads
errors.py       UnknownUpstream, CallRejected
replies.py      FixedExchange (ready replies), the open-circuit 503
routes.py       Route (pool + breaker + policy per upstream), RetryBudget
stats.py        RouteStats: counters and a latency histogram
listeners.py    outbound and inbound request handlers
transparent.py  the transparent listener (original destination -> route or relay)
runtime.py      SidecarRuntime: routes, hooks, the pipeline, check, status
endpoint_hint.py the stand-in route resolver (ids folded)
"""
