"""No input gives a 500: Schemathesis (property-based tests generated from the server's own OpenAPI schema) sends
valid and invalid requests to every operation of a running ``retrieval serve`` and checks that no answer is a 5xx
and that every answer matches the schema (its status, content type and body; every error is the one-line
``{"error": ...}``). The HTML pages, which the schema leaves out, get the same check from Hypothesis directly.

The server serves its own small index (three photos copied to a temporary folder) with its HOME in that folder:
whatever the generated requests add, remove, move or trash stays there."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_process import Served, small_index

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (the dev extra)")
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = 25
"""Generated requests per operation and generation mode (valid, invalid): the whole file runs in well under a
minute."""
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
"""No 5xx; the status, content type, headers and body as the schema documents them."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    index = small_index(root)
    home = root / "home"
    home.mkdir()
    served = Served(index, log=root / "serve.log", env={"HOME": str(home), "XDG_DATA_HOME": str(home / "share")})
    yield served
    served.stop()
    log = served.stderr()
    assert "Traceback" not in log, log


@pytest.fixture(scope="module")
def api_schema(server):
    return schemathesis.openapi.from_url(server.url + "/openapi.json")


OPERATIONS = ["POST /api/search", "GET /api/images", "POST /api/images", "GET /api/folders",
              "GET /api/images/{image_id}", "DELETE /api/images/{image_id}", "GET /api/images/{image_id}/facts",
              "GET /api/images/{image_id}/original", "GET /api/images/{image_id}/thumbnail", "GET /api/info",
              "POST /api/match", "GET /api/duplicates", "POST /api/duplicates/action", "POST /api/duplicates/undo",
              "POST /api/duplicates/against"]
"""Every operation of the schema (:func:`test_the_fuzzed_operations_are_every_operation_of_the_schema`)."""


def test_the_fuzzed_operations_are_every_operation_of_the_schema(api_schema):
    ops = {f"{r.ok().method.upper()} {r.ok().path}" for r in api_schema.get_all_operations()}
    assert ops == set(OPERATIONS), "a route was added or removed: update OPERATIONS"


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
@pytest.mark.parametrize("label", OPERATIONS)
def test_every_operation_answers_without_5xx_and_as_its_schema_says(api_schema, label, mode):
    """``EXAMPLES`` requests generated from the operation's schema (valid ones, or ones the schema refuses), each
    answered without a 5xx, with a documented status, content type, headers and body; an invalid one refused."""
    operation = api_schema.find_operation_by_label(label)
    assert operation is not None, label
    if mode == GenerationMode.NEGATIVE and not list(operation.iter_parameters()) and not operation.body:
        pytest.skip(f"{label} takes no parameter nor body that a request could get wrong (its valid requests are "
                    f"fuzzed)")

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def check(case):
        case.call_and_validate(checks=CHECKS, timeout=60)

    check()


@pytest.mark.parametrize("label", OPERATIONS)
def test_every_operation_answers_its_boundary_cases(api_schema, label):
    """Schemathesis' coverage phase, deterministic: for every parameter the values at and just past its schema's
    bounds (the largest id, the one past it), missing and wrong types, each checked as above."""
    operation = api_schema.find_operation_by_label(label)
    config = api_schema.config.generation_for(operation=operation, phase="coverage")
    cases = list(api_schema.iter_coverage_cases(operation, generation_modes=list(GenerationMode),
                                                generation_config=config))
    assert cases
    failures = []
    for case in cases:
        try:
            case.call_and_validate(checks=CHECKS, timeout=60)
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, f"{len(failures)} of {len(cases)} cases failed; the first:\n{failures[0]}"


text = st.text(max_size=40)
number = st.one_of(st.integers(), st.integers(min_value=-(10**30), max_value=10**30), st.just(99999999999999999999999))
value = st.one_of(text, number.map(str))


@given(path=st.sampled_from(["/", "/query", "/match", "/duplicates"]),
       params=st.dictionaries(st.sampled_from(["id", "a", "b", "box", "q", "folder", "after", "before"]), value,
                              max_size=4))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_pages_never_answer_5xx(server, path, params):
    r = server.client.get(path, params=params)
    assert r.status_code < 500, (path, params, r.text)
    if r.status_code >= 400:
        body = r.json()
        assert set(body) <= {"error", "field"} and "\n" not in body["error"], body


def test_the_reported_overflow_is_a_400(server):
    r = httpx.get(server.url + "/api/images", params={"offset": "99999999999999999999999"}, timeout=60)
    assert r.status_code == 400 and r.json() == {"error": "offset: Input should be less than or equal to "
                                                          "9223372036854775807."}, r.text
