from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CircuitState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CIRCUIT_STATE_UNSPECIFIED: _ClassVar[CircuitState]
    CIRCUIT_STATE_CLOSED: _ClassVar[CircuitState]
    CIRCUIT_STATE_OPEN: _ClassVar[CircuitState]
    CIRCUIT_STATE_HALF_OPEN: _ClassVar[CircuitState]
CIRCUIT_STATE_UNSPECIFIED: CircuitState
CIRCUIT_STATE_CLOSED: CircuitState
CIRCUIT_STATE_OPEN: CircuitState
CIRCUIT_STATE_HALF_OPEN: CircuitState

class Header(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class CallRequest(_message.Message):
    __slots__ = ("upstream", "method", "path", "headers", "body", "timeout_ms", "serving_endpoint")
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SERVING_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    upstream: str
    method: str
    path: str
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    body: bytes
    timeout_ms: int
    serving_endpoint: str
    def __init__(self, upstream: _Optional[str] = ..., method: _Optional[str] = ..., path: _Optional[str] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., body: _Optional[bytes] = ..., timeout_ms: _Optional[int] = ..., serving_endpoint: _Optional[str] = ...) -> None: ...

class CallResponse(_message.Message):
    __slots__ = ("status", "headers", "body")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    status: int
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    body: bytes
    def __init__(self, status: _Optional[int] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., body: _Optional[bytes] = ...) -> None: ...

class Cause(_message.Message):
    __slots__ = ("service", "endpoint", "reason")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    service: str
    endpoint: str
    reason: str
    def __init__(self, service: _Optional[str] = ..., endpoint: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("upstream", "circuit_state", "retry_after_ms", "cause_chain", "reason")
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_STATE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    CAUSE_CHAIN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    upstream: str
    circuit_state: CircuitState
    retry_after_ms: int
    cause_chain: _containers.RepeatedCompositeFieldContainer[Cause]
    reason: str
    def __init__(self, upstream: _Optional[str] = ..., circuit_state: _Optional[_Union[CircuitState, str]] = ..., retry_after_ms: _Optional[int] = ..., cause_chain: _Optional[_Iterable[_Union[Cause, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class CheckRequest(_message.Message):
    __slots__ = ("upstream", "endpoint")
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    upstream: str
    endpoint: str
    def __init__(self, upstream: _Optional[str] = ..., endpoint: _Optional[str] = ...) -> None: ...

class CheckResponse(_message.Message):
    __slots__ = ("available", "circuit_state", "retry_after_ms", "cause_chain", "available_fraction", "live_instances", "edges")
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_STATE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    CAUSE_CHAIN_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FRACTION_FIELD_NUMBER: _ClassVar[int]
    LIVE_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    available: bool
    circuit_state: CircuitState
    retry_after_ms: int
    cause_chain: _containers.RepeatedCompositeFieldContainer[Cause]
    available_fraction: float
    live_instances: int
    edges: _containers.RepeatedCompositeFieldContainer[DependencyEdge]
    def __init__(self, available: _Optional[bool] = ..., circuit_state: _Optional[_Union[CircuitState, str]] = ..., retry_after_ms: _Optional[int] = ..., cause_chain: _Optional[_Iterable[_Union[Cause, _Mapping]]] = ..., available_fraction: _Optional[float] = ..., live_instances: _Optional[int] = ..., edges: _Optional[_Iterable[_Union[DependencyEdge, _Mapping]]] = ...) -> None: ...

class DependencyEdge(_message.Message):
    __slots__ = ("caller", "callee", "required", "optionality", "survived", "failed_with")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    CALLEE_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    OPTIONALITY_FIELD_NUMBER: _ClassVar[int]
    SURVIVED_FIELD_NUMBER: _ClassVar[int]
    FAILED_WITH_FIELD_NUMBER: _ClassVar[int]
    caller: str
    callee: str
    required: bool
    optionality: str
    survived: float
    failed_with: float
    def __init__(self, caller: _Optional[str] = ..., callee: _Optional[str] = ..., required: _Optional[bool] = ..., optionality: _Optional[str] = ..., survived: _Optional[float] = ..., failed_with: _Optional[float] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("subscriber_service", "endpoints", "since_version")
    SUBSCRIBER_SERVICE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    SINCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    subscriber_service: str
    endpoints: _containers.RepeatedScalarFieldContainer[str]
    since_version: int
    def __init__(self, subscriber_service: _Optional[str] = ..., endpoints: _Optional[_Iterable[str]] = ..., since_version: _Optional[int] = ...) -> None: ...

class AvailabilityUpdate(_message.Message):
    __slots__ = ("service", "endpoint", "available", "cause_chain", "expires_at_unix_ms", "version", "signature", "instance", "reason")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_CHAIN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    service: str
    endpoint: str
    available: bool
    cause_chain: _containers.RepeatedCompositeFieldContainer[Cause]
    expires_at_unix_ms: int
    version: int
    signature: bytes
    instance: str
    reason: str
    def __init__(self, service: _Optional[str] = ..., endpoint: _Optional[str] = ..., available: _Optional[bool] = ..., cause_chain: _Optional[_Iterable[_Union[Cause, _Mapping]]] = ..., expires_at_unix_ms: _Optional[int] = ..., version: _Optional[int] = ..., signature: _Optional[bytes] = ..., instance: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
