"""The sidecar's YAML validated with pydantic; one-line errors naming the key (`ConfigError`).

Only `ccb sidecar` (before it execs the serving process) and tests load this package: it builds
the plain classes of `config.py`, which are all the serving process holds (it never imports
pydantic). `sidecar.py` holds the models of the file, `cascade.py` those of its `cascade:`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import yaml

from cascadebreaker.sidecar import config as plain
from cascadebreaker.sidecar.config import ConfigError
from cascadebreaker.sidecar.schema.cascade import validate_cascade
from cascadebreaker.sidecar.schema.sidecar import validate_sidecar

__all__ = ["ConfigError", "load_config", "parse_cascade_config", "parse_config", "validate"]


def validate(data: Any) -> dict[str, Any]:
    """Validate already-parsed YAML/JSON data, the `cascade:` section included; its validated
    form (JSON-able, defaults filled) for `config.config_from_dict`. ConfigError names the
    first bad key."""
    model = validate_sidecar(data)
    cascade = validate_cascade(model.cascade, model.upstreams)
    return {**model.model_dump(mode="json"), "cascade": cascade.model_dump(mode="json")}


def parse_config(data: Any) -> plain.SidecarConfig:
    """Validate already-parsed YAML/JSON data; raise ConfigError naming the first bad key."""
    config: plain.SidecarConfig = dataclasses.replace(
        cast(Any, plain.config_from_dict(validate(data))), source=data
    )
    return config


def load_config(path: str | Path) -> plain.SidecarConfig:
    """Read and validate a YAML configuration file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}".replace("\n", " ")) from None
    return parse_config(data)


def parse_cascade_config(
    data: dict[str, Any] | None, upstreams: Iterable[str] | None = None
) -> plain.CascadeConfig:
    """The `cascade:` section alone, validated like `_cascade_model` (tests, docs)."""
    return plain.cascade_config_from_dict(validate_cascade(data, upstreams).model_dump(mode="json"))
