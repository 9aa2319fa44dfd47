"""The modules the opt-in mypyc build compiles avoid what mypyc compiles wrongly, silently.

The list is pyproject.toml's [tool.hatch.build.targets.wheel.hooks.mypyc] include. Each rule
below is a construct that passed mypy --strict, imported fine compiled, and then misbehaved:
scripts/test-compiled runs the suites on the compiled wheel; these checks run interpreted, so
every `scripts/test` run keeps the sources safe to compile.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import tomllib
import weakref
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def compiled_paths() -> list[str]:
    """The include patterns of the mypyc hook: one source file each, from the project root."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hook = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    return [pattern.lstrip("/") for pattern in hook["include"]]


def module_name(path: str) -> str:
    return path.removeprefix("src/").removesuffix(".py").replace("/", ".")


COMPILED = compiled_paths()


def test_the_build_is_opt_in_and_names_only_existing_files() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    hook = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["mypyc"]
    assert hook["enable-by-default"] is False  # pip install needs no compiler
    assert COMPILED
    for path in COMPILED:
        assert path.endswith(".py") and (ROOT / path).is_file(), path


@pytest.mark.parametrize("path", COMPILED)
def test_no_method_alias_in_a_class_body(path: str) -> None:
    # `on_message_complete = _request_complete` compiled into an attribute that was never set:
    # httptools found no callback and keep-alive requests after the first were cut with 408.
    tree = ast.parse((ROOT / path).read_text())
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        methods = {
            node.name
            for node in cls.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for node in cls.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Name):
                assert node.value.id not in methods, (
                    f"{path}:{node.lineno}: {cls.name} aliases its method {node.value.id}; "
                    "define a method that calls it"
                )


def class_body(cls: type) -> list[ast.stmt]:
    """The statements of `cls`'s body, read from its .py (a compiled class has no annotations)."""
    source = ROOT / "src" / (cls.__module__.replace(".", "/") + ".py")
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return node.body
    raise LookupError(f"{cls.__qualname__} not found in {source}")


@pytest.mark.parametrize("path", COMPILED)
def test_exception_class_attributes_are_classvars(path: str) -> None:
    # Compiled, `kind = "error"` on an exception became an instance attribute the subclasses'
    # values never reached: AttributeError, and a request to an unreachable upstream hung.
    module = importlib.import_module(module_name(path))
    for _, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ != module.__name__ or not issubclass(cls, BaseException):
            continue
        ours = [k for k in cls.__mro__ if k.__module__.startswith("cascadebreaker.")]
        classvars = {
            node.target.id
            for klass in ours
            for node in class_body(klass)
            if isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and "ClassVar" in ast.unparse(node.annotation)
        }
        for node in class_body(cls):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for name in (t.id for t in targets if isinstance(t, ast.Name)):
                assert name.startswith("__") or name in classvars, (
                    f"{cls.__qualname__}.{name}: a class attribute of an exception must be "
                    "declared ClassVar[...] in the base that introduces it"
                )


def test_weakly_referenced_classes_stay_interpreted() -> None:
    # mypyc's classes take no weak references; every CircuitBreaker is in a WeakSet.
    from cascadebreaker import CircuitBreaker

    assert "src/cascadebreaker/breaker.py" not in COMPILED
    breaker = CircuitBreaker("weakly-held")
    assert weakref.ref(breaker)() is breaker


def test_per_request_objects_carry_no_instance_dict() -> None:
    """The exchange and the call name the sidecar's Protocols as bases (compiled, calls through
    those types go native); the Protocols add no slots, so interpreted the objects stay as small
    as their own slots make them (no `__dict__`, no `__weakref__`). Compiled, mypyc reserves
    a dict and a weak-reference pointer beside the Protocols' typing bases, at the end of the
    native layout (never filled; the exchange grew by 24 bytes in all)."""
    from cascadebreaker.sidecar.http import wire
    from cascadebreaker.sidecar.proxy.call import AwaitedCall
    from cascadebreaker.sidecar.proxy.exchange import ProxyExchange
    from cascadebreaker.sidecar.proxy.replies import FixedExchange

    for cls in (ProxyExchange, AwaitedCall, FixedExchange):
        if wire.COMPILED:
            end = cls.__basicsize__
            assert (cls.__dictoffset__, cls.__weakrefoffset__) == (end - 16, end - 8), cls
        else:
            assert cls.__dictoffset__ == 0 and cls.__weakrefoffset__ == 0, cls
