"""The saga demo: FastAPI services on loopback, a launcher, fault switches, load and experiments.

`ccb demo` runs the story, `ccb fault` switches faults of a running demo, `ccb demo workerpool`
runs the worker-pool scenario and `ccb experiment` measures the three modes under three faults.
"""
