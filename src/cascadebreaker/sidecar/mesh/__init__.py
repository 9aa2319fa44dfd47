"""The cascade wired into the sidecar: it plugs into the proxy only through the hook ports.

plugin.py      install_cascade: build the node, register its hook, views and admin route
hook.py        CascadeHook: learning and refusals on every request
node.py        CascadeNode: the availability table, its inputs and outputs
bus.py         UpdateBus: what carries updates between sidecars
watch.py       WatchHub, PeerWatchers: propagation over the gRPC Watch stream
redis_bus.py   RedisBus: propagation over Redis pub/sub
admin.py       /availability and the cascade's metrics
hop_memo.py    MemoHopTrust: hop tokens remembered
config.py      the `cascade:` section
"""
