"""bench/sidecar/callprofile.py: callgrind_annotate's listing read into names and layers."""

from __future__ import annotations

import pytest

from bench.sidecar.callprofile import function_name, parse_annotate, parse_groups

_LIBPYTHON = "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"
_NATIVE = "/tmp/t/src/2020affd__mypyc.cpython-311-x86_64-linux-gnu.so"
_PARSER = "/v/site-packages/httptools/parser/parser.cpython-311-x86_64-linux-gnu.so"
_BUILD = "/tmp/python-build.1/Python-3.11.7"
LISTING = f"""\
--------------------------------------------------------------------------------
Ir                  file:function
--------------------------------------------------------------------------------
1,000,000 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
  400,000 (40.00%)  {_BUILD}/Objects/obmalloc.c:_PyObject_Free [{_LIBPYTHON}]
  300,000 (30.00%)  /tmp/tmpa/build/__native_1.c:CPyDef_proxy___exchange___ProxyExchange___start [{_NATIVE}]
  100,000 (10.00%)  /project/vendor/llhttp/src/llhttp.c:llhttp__internal__run [{_PARSER}]
   60,000 ( 6.00%)  {_BUILD}/./Include/object.h:CPyDef_proxy___exchange___ProxyExchange___start
   40,000 ( 4.00%)  {_BUILD}/./Include/object.h:list_dealloc
  100,000 (10.00%)  ./string/../memmove-vec-unaligned-erms.S:__memcpy_avx_unaligned_erms [/usr/lib/x86_64-linux-gnu/libc.so.6]
"""  # noqa: E501


def test_compiled_functions_get_their_python_names() -> None:
    native = "/tmp/tmpa/build/__native_1.c:CPyDef_proxy___exchange___ProxyExchange___start [x.so]"
    assert function_name(native) == "proxy.exchange.ProxyExchange.start"
    assert function_name(f"{_BUILD}/Python/ceval.c:_PyEval_EvalFrameDefault") == (
        "ceval.c:_PyEval_EvalFrameDefault"
    )


def test_own_costs_add_up_across_the_files_a_function_is_listed_under() -> None:
    own = parse_annotate(LISTING, inclusive=False)
    assert own["total"] == 1_000_000
    # Its .c file and a header inlined into it: two parts of one function's own code.
    assert own["proxy.exchange.ProxyExchange.start"] == 360_000


def test_inclusive_costs_keep_the_largest_listing_never_the_sum() -> None:
    inclusive = parse_annotate(LISTING, inclusive=True)
    assert inclusive["proxy.exchange.ProxyExchange.start"] == 300_000


def test_layers_take_lines_without_an_object_from_their_function_or_build_path() -> None:
    groups = parse_groups(LISTING)
    assert groups == {
        "CPython runtime (objects, calls, the interpreter)": pytest.approx(440_000),
        "compiled sidecar code (mypyc)": pytest.approx(360_000),
        "httptools / llhttp (parsing)": pytest.approx(100_000),
        "libc (memory, system call wrappers)": pytest.approx(100_000),
    }
    assert sum(groups.values()) == pytest.approx(1_000_000)
