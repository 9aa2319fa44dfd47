"""Endpoints and route templates: naming, folding, matching, cardinality."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cascadebreaker.cascade import Endpoint, RouteTemplates, fold_path, normalize_template

_token = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")),
    min_size=1,
    max_size=20,
).filter(lambda s: s.split() == [s])


def test_str_form_names_service_method_and_template() -> None:
    e = Endpoint("payment", "POST", "/v1/charges/{id}")
    assert str(e) == "payment POST /v1/charges/{id}"
    assert Endpoint.parse(str(e)) == e
    assert hash(e) == hash(Endpoint.parse("payment POST /v1/charges/{id}"))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "payment",
        "payment POST",
        "payment POST /a extra",
        "payment  POST /a",
        " payment POST /a",
    ],
)
def test_parse_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        Endpoint.parse(text)


@pytest.mark.parametrize(("service", "method", "template"), [("", "GET", "/"), ("a b", "GET", "/")])
def test_constructor_rejects_empty_or_spaced_parts(
    service: str, method: str, template: str
) -> None:
    with pytest.raises(ValueError, match="invalid endpoint part"):
        Endpoint(service, method, template)


@given(_token, _token, _token)
def test_parse_inverts_str(service: str, method: str, template: str) -> None:
    e = Endpoint(service, method, template)
    assert Endpoint.parse(str(e)) == e


def test_service_wide_and_overflow_are_distinct() -> None:
    assert Endpoint.service_wide("payment").is_service_wide
    assert not Endpoint.overflow("payment").is_service_wide
    assert Endpoint.service_wide("payment") != Endpoint.overflow("payment")


@pytest.mark.parametrize(
    ("path", "folded"),
    [
        ("/v1/charges/123", "/v1/charges/{id}"),
        ("/v1/charges/123/refunds/9", "/v1/charges/{id}/refunds/{id}"),
        ("/v1/orders/3f2b1c4e-9a8d-4e7f-b6a5-0c1d2e3f4a5b", "/v1/orders/{id}"),
        ("/v1/blobs/deadbeefdeadbeef", "/v1/blobs/{id}"),
        ("/v1/blobs/deadbeef", "/v1/blobs/deadbeef"),  # short hex is a word, not an id
        ("/v1/charges/123?expand=customer", "/v1/charges/{id}"),
        ("/v1/items/abc123", "/v1/items/abc123"),
        ("/v2", "/v2"),
        ("", "/"),
        ("v1/charges/7", "/v1/charges/{id}"),
    ],
)
def test_fold_path(path: str, folded: str) -> None:
    assert fold_path(path) == folded


@given(st.lists(st.one_of(st.integers(0, 10**12).map(str), st.text("abcxyz", min_size=1))))
def test_fold_path_is_idempotent(segments: list[str]) -> None:
    path = "/" + "/".join(segments)
    assert fold_path(fold_path(path)) == fold_path(path)


def test_configured_template_wins_over_folding() -> None:
    routes = RouteTemplates({"users": ["/users/{name}/orders/{order}"]})
    assert routes.endpoint("users", "get", "/users/alice/orders/7?x=1") == Endpoint(
        "users", "GET", "/users/{id}/orders/{id}"
    )


def test_most_literal_template_wins() -> None:
    routes = RouteTemplates({"payment": ["/v1/charges/{id}", "/v1/charges/search"]})
    assert routes.endpoint("payment", "GET", "/v1/charges/search").template == "/v1/charges/search"
    assert routes.endpoint("payment", "GET", "/v1/charges/ch_1").template == "/v1/charges/{id}"


def test_templates_are_per_service() -> None:
    routes = RouteTemplates({"users": ["/users/{name}"]})
    assert routes.endpoint("orders", "GET", "/users/alice").template == "/users/alice"


def test_template_must_start_with_slash() -> None:
    with pytest.raises(ValueError, match="must start with '/'"):
        RouteTemplates({"s": ["users/{id}"]})


def test_parameter_names_are_not_identity() -> None:
    assert normalize_template("/v1/charges/{charge}/x") == "/v1/charges/{id}/x"
    assert normalize_template("/plain") == "/plain"


def test_cardinality_cap_folds_overflow_into_one_endpoint() -> None:
    routes = RouteTemplates(max_per_service=3)
    named = {routes.endpoint("s", "GET", f"/word{i}") for i in range(10)}
    assert len(named) == 4
    assert Endpoint.overflow("s") in named
    assert routes.known("s") == 3
    # Already-known endpoints keep their names after the cap is reached.
    assert routes.endpoint("s", "GET", "/word0") == Endpoint("s", "GET", "/word0")
    # Other services have their own budget.
    assert routes.endpoint("t", "GET", "/word9") == Endpoint("t", "GET", "/word9")


def test_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_per_service"):
        RouteTemplates(max_per_service=0)


@given(st.lists(st.text("abcdefgh/", max_size=12), max_size=60), st.integers(1, 5))
def test_cap_bounds_distinct_endpoints(paths: list[str], cap: int) -> None:
    routes = RouteTemplates(max_per_service=cap, cache_size=4)
    named = {routes.endpoint("s", "GET", p) for p in paths}
    assert len(named - {Endpoint.overflow("s")}) <= cap


_LINES = st.tuples(
    st.sampled_from(["payment", "cart"]),
    st.sampled_from(["GET", "get", "POST"]),
    st.sampled_from(["/v1/charges/42", "/v1/charges/refunds", "/v1/charges/43?x=1", "/"]),
)


@given(st.lists(_LINES | st.sampled_from(["add"]), max_size=12))
@example(
    [("payment", "GET", "/v1/charges/refunds"), "add", ("payment", "GET", "/v1/charges/refunds")]
)
def test_remembered_lines_name_what_a_fresh_lookup_names(steps: list[object]) -> None:
    """The last line and the cache answer repeats; a template added between two asks of one
    line renames it at once (the memo is dropped with the cache)."""
    templates = RouteTemplates()
    for step in steps:
        if step == "add":
            templates.add("payment", "/v1/charges/{id}")
            continue
        assert isinstance(step, tuple)
        service, method, path = step
        fresh = RouteTemplates(
            {"payment": ["/v1/charges/{id}"]} if templates.version else None
        ).endpoint(service, method, path)
        assert templates.endpoint(service, method, path) == fresh
        assert templates.endpoint(service, method, path) == fresh  # asked again: remembered
