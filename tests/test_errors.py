"""Every failure leaves the server in the one OpenAI-shaped error envelope."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from server.errors import (
    APIError,
    AuthenticationError,
    ConflictError,
    ExceedContextSizeError,
    InvalidRequestError,
    NotFoundError,
    NotSupportedError,
    UnavailableError,
    install_error_handlers,
)
from server.protocol import ChatCompletionRequest

SECRET = "token-4f1c secret detail"


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest) -> dict:
        return {"n_messages": len(body.messages)}

    @app.get("/slots/{id_slot}")
    async def slot(id_slot: int) -> dict:
        return {"id": id_slot}

    @app.delete("/slots/{id_slot}")
    async def erase(id_slot: int) -> dict:
        return {"id": id_slot}

    @app.get("/raise/{kind}")
    async def raise_(kind: str) -> dict:
        errors = {
            "invalid": InvalidRequestError("bad slot id", param="id_slot"),
            "auth": AuthenticationError(),
            "missing": NotFoundError("no slot 9", param="id_slot"),
            "conflict": ConflictError("slot 1 is busy"),
            "unsupported": NotSupportedError("slot saving is off: start with --slot-save-path"),
            "loading": UnavailableError("loading model"),
            "context": ExceedContextSizeError(n_prompt_tokens=5000, n_ctx=4096),
        }
        if kind == "crash":
            raise RuntimeError(SECRET)
        raise errors[kind]

    return TestClient(app, raise_server_exceptions=False)


def assert_envelope(response, status: int, type_: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert {"message", "type", "param", "code"} <= set(error)
    assert error["type"] == type_
    assert isinstance(error["message"], str) and error["message"]
    return error


@pytest.mark.parametrize(
    "kind,status,type_",
    [
        ("invalid", 400, "invalid_request_error"),
        ("auth", 401, "authentication_error"),
        ("missing", 404, "not_found_error"),
        ("conflict", 409, "conflict_error"),
        ("unsupported", 501, "not_supported_error"),
        ("loading", 503, "unavailable_error"),
        ("context", 400, "exceed_context_size_error"),
    ],
)
def test_each_api_error_kind_has_its_status_and_type(client, kind, status, type_):
    assert_envelope(client.get(f"/raise/{kind}"), status, type_)


def test_exceed_context_size_carries_the_token_counts_and_openais_code(client):
    error = assert_envelope(client.get("/raise/context"), 400, "exceed_context_size_error")
    assert error["n_prompt_tokens"] == 5000 and error["n_ctx"] == 4096
    assert error["code"] == "context_length_exceeded"
    assert "maximum context length is 4096" in error["message"]


def test_an_authentication_error_names_the_bearer_scheme(client):
    response = client.get("/raise/auth")
    assert response.headers["www-authenticate"] == "Bearer"


def test_a_body_validation_error_is_a_400_whose_param_is_the_field_path(client):
    response = client.post("/v1/chat/completions", json={"messages": [{"role": "robot", "content": "x"}]})
    error = assert_envelope(response, 400, "invalid_request_error")
    assert error["param"] == "messages.0.role"
    assert "messages.0.role" in error["message"]
    assert "body" not in error["message"]


def test_a_rule_checked_at_the_message_level_still_reports_the_sub_field(client):
    response = client.post("/v1/chat/completions", json={"messages": [{"role": "tool", "content": "42"}]})
    error = assert_envelope(response, 400, "invalid_request_error")
    assert error["param"] == "messages.0.tool_call_id"


def test_the_reasoning_budget_range_error_uses_llama_cpps_wording_over_http(client):
    response = client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}], "thinking_budget_tokens": 2**31},
    )
    error = assert_envelope(response, 400, "invalid_request_error")
    assert error["param"] == "thinking_budget_tokens"
    assert error["message"] == (
        "thinking_budget_tokens must be between -1 <= value <= 2147483647, but got 2147483648"
    )


def test_a_bad_path_parameter_is_named_without_fastapis_location_prefix(client):
    error = assert_envelope(client.get("/slots/abc"), 400, "invalid_request_error")
    assert error["param"] == "id_slot"
    assert error["message"].startswith("id_slot: ")


def test_several_errors_report_the_first_and_count_the_rest(client):
    response = client.post("/v1/chat/completions", json={"messages": [], "n": 0, "top_p": 0})
    error = assert_envelope(response, 400, "invalid_request_error")
    assert "(and 2 more errors)" in error["message"]


def test_malformed_json_is_a_400_saying_the_body_could_not_be_parsed(client):
    response = client.post(
        "/v1/chat/completions", content=b'{"messages": [', headers={"Content-Type": "application/json"}
    )
    error = assert_envelope(response, 400, "invalid_request_error")
    assert error["message"].startswith("could not parse JSON body")
    assert "position" in error["message"]


def test_a_non_json_content_type_is_refused_with_the_header_named(client):
    response = client.post(
        "/v1/chat/completions",
        content=b'{"messages": []}',
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    error = assert_envelope(response, 415, "invalid_request_error")
    assert "Content-Type: application/json" in error["message"]


def test_a_missing_body_is_a_400_not_a_crash(client):
    response = client.post("/v1/chat/completions")
    error = assert_envelope(response, 400, "invalid_request_error")
    assert "JSON body" in error["message"]


def test_a_body_that_is_not_an_object_is_refused_as_such(client):
    error = assert_envelope(client.post("/v1/chat/completions", json=[1, 2]), 400, "invalid_request_error")
    assert error["message"] == "the request body must be a JSON object"


def test_an_unknown_route_is_a_404_in_the_envelope(client):
    error = assert_envelope(client.get("/v1/nothing-here"), 404, "not_found_error")
    assert "/v1/nothing-here" in error["message"]


def test_a_wrong_method_is_a_405_in_the_envelope_with_the_allowed_methods(client):
    response = client.get("/v1/chat/completions")
    error = assert_envelope(response, 405, "invalid_request_error")
    assert "POST" in response.headers["allow"]
    assert "GET" in error["message"]


def test_a_405_names_every_method_of_the_path_though_each_is_a_route_of_its_own(client):
    response = client.put("/slots/3")
    error = assert_envelope(response, 405, "invalid_request_error")
    assert response.headers["allow"] == "DELETE, GET"
    assert error["message"].endswith("(allowed: DELETE, GET)")


def test_an_unexpected_exception_is_a_generic_500_and_the_traceback_stays_in_the_log(client, caplog):
    with caplog.at_level(logging.ERROR, logger="anchorage.errors"):
        response = client.get("/raise/crash")
    error = assert_envelope(response, 500, "server_error")
    assert SECRET not in response.text
    assert "Traceback" not in response.text and "RuntimeError" not in response.text
    record = next(r for r in caplog.records if r.name == "anchorage.errors")
    assert record.exc_info is not None and SECRET in str(record.exc_info[1])
    assert "/raise/crash" in record.getMessage()


def test_extra_fields_ride_in_the_error_object():
    err = APIError(418, "short and stout", "teapot_error", param="p", code="c", extra={"n": 1})
    assert err.body() == {
        "error": {"message": "short and stout", "type": "teapot_error", "param": "p", "code": "c", "n": 1}
    }
