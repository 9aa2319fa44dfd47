"""The cascade: endpoints, the learned dependency graph, availability rules and updates.

Everything here is pure (no I/O); clocks are injected. The sidecar drives it:

- per inbound request: `Learner.inbound` (refuse if our endpoint is unavailable, remember the
  trace key), then `Learner.inbound_done` with whether our app answered success (evidence of
  learned optionality, optionality.py);
- per outbound call: `Learner.outbound` (learn the edge, refuse if the target is unavailable),
  and `Learner.call_failed` when that call failed or was refused;
- on breaker transitions: `AvailabilityTable.breaker_transition`;
- on updates from peers: `AvailabilityTable.receive`;
- periodically: `AvailabilityTable.expire`, `AvailabilityTable.expire_edges`.

Every input returns the `AvailabilityUpdate`s to push to callers and publish.
"""

from cascadebreaker.cascade.availability import (
    AvailabilityTable,
    Propagation,
    Target,
    Unavailability,
)
from cascadebreaker.cascade.endpoints import (
    Endpoint,
    RouteTemplates,
    fold_path,
    normalize_template,
)
from cascadebreaker.cascade.graph import (
    OPTIONALITY_LEARNED,
    OPTIONALITY_MARKED,
    OPTIONALITY_REQUIRED,
    DependencyGraph,
    Edge,
    EdgeSource,
)
from cascadebreaker.cascade.learning import (
    HeaderGetter,
    InboundDecision,
    Learner,
    OutboundDecision,
    hop_material,
)
from cascadebreaker.cascade.optionality import (
    Evidence,
    OptionalityRules,
    SurvivalLedger,
    TrickleGate,
)
from cascadebreaker.cascade.trace import (
    TraceContext,
    TraceTable,
    parse_b3,
    parse_traceparent,
    trace_context,
    trace_key,
    trace_key_of,
)
from cascadebreaker.cascade.trust import (
    HOP_HEADER,
    OPTIONAL_HEADER,
    SECRET_ENV,
    SERVING_ENDPOINT_HEADER,
    HopCheck,
    HopTrust,
    is_loopback,
    load_secret,
)
from cascadebreaker.cascade.updates import (
    AvailabilityUpdate,
    Cause,
    CauseChain,
    MalformedUpdate,
    Verdict,
    canonical_bytes,
    sign,
    verify,
    verify_signature,
    version_bound,
)

__all__ = [
    "HOP_HEADER",
    "OPTIONALITY_LEARNED",
    "OPTIONALITY_MARKED",
    "OPTIONALITY_REQUIRED",
    "OPTIONAL_HEADER",
    "SECRET_ENV",
    "SERVING_ENDPOINT_HEADER",
    "AvailabilityTable",
    "AvailabilityUpdate",
    "Cause",
    "CauseChain",
    "DependencyGraph",
    "Edge",
    "EdgeSource",
    "Endpoint",
    "Evidence",
    "HeaderGetter",
    "HopCheck",
    "HopTrust",
    "InboundDecision",
    "Learner",
    "MalformedUpdate",
    "OptionalityRules",
    "OutboundDecision",
    "Propagation",
    "RouteTemplates",
    "SurvivalLedger",
    "Target",
    "TraceContext",
    "TraceTable",
    "TrickleGate",
    "Unavailability",
    "Verdict",
    "canonical_bytes",
    "fold_path",
    "hop_material",
    "is_loopback",
    "load_secret",
    "normalize_template",
    "parse_b3",
    "parse_traceparent",
    "sign",
    "trace_context",
    "trace_key",
    "trace_key_of",
    "verify",
    "verify_signature",
    "version_bound",
]
