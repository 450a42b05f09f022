"""API keys on every route, against live servers.

With `--api-key`, every route needs `Authorization: Bearer KEY` or
`X-Api-Key: KEY` except `/health` (and `/v1/health`) and `/v1/models`;
a missing or wrong key is a 401 `authentication_error` with a
`WWW-Authenticate: Bearer` header. Slot actions need `--admin-api-key` when
one is set, else the API key.

`keyed` has both keys (and a slot directory, so an admitted slot action
succeeds); `api_only` has just `--api-key`.
"""

from __future__ import annotations

import warnings

import httpx
import pytest

from live_server import live_server

API_KEY = "sk-test-api-key"
ADMIN_KEY = "sk-test-admin-key"

PUBLIC = [("GET", "/health", None), ("GET", "/v1/health", None), ("GET", "/v1/models", None)]
PROTECTED = [
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                      "stream": True}),
    ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1}),
    ("POST", "/tokenize", {"content": "hi"}),
    ("POST", "/detokenize", {"tokens": [1, 2]}),
    ("GET", "/props", None),
    ("GET", "/metrics", None),
    ("GET", "/slots", None),
    ("GET", "/openapi.json", None),
]
SLOT_ACTION = ("POST", "/slots/0?action=erase", None)
ROUTE_IDS = [f"{m} {p}{' stream' if b and b.get('stream') else ''}" for m, p, b in PROTECTED]


@pytest.fixture(scope="module")
def keyed(tiny_checkpoint, tmp_path_factory):
    with live_server(tiny_checkpoint("qwen3"), api_key=API_KEY, admin_api_key=ADMIN_KEY, allowed_origins="*",
                     slot_save_path=tmp_path_factory.mktemp("slots")) as s:
        yield s


@pytest.fixture(scope="module")
def api_only(tiny_checkpoint, tmp_path_factory):
    with live_server(tiny_checkpoint("qwen3"), api_key=API_KEY,
                     slot_save_path=tmp_path_factory.mktemp("slots")) as s:
        yield s


def _call(server, route, headers=None) -> httpx.Response:
    method, path, body = route
    return httpx.request(method, server.base_url + path, json=body, headers=headers or {}, timeout=60)


def _assert_401(r: httpx.Response, *words: str) -> None:
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    err = r.json()["error"]
    assert err["type"] == "authentication_error"
    for word in ("key", *words):
        assert word in err["message"]


@pytest.mark.parametrize("route", PROTECTED, ids=ROUTE_IDS)
def test_a_protected_route_refuses_a_request_without_a_key(keyed, route):
    _assert_401(_call(keyed, route), "Authorization: Bearer")


@pytest.mark.parametrize("route", PROTECTED, ids=ROUTE_IDS)
def test_a_protected_route_refuses_a_wrong_key(keyed, route):
    _assert_401(_call(keyed, route, {"Authorization": "Bearer wrong-key"}))
    _assert_401(_call(keyed, route, {"X-Api-Key": "wrong-key"}))


@pytest.mark.parametrize("headers", [
    {"Authorization": f"Bearer {API_KEY[:-1]}"},  # a prefix of the key is not the key
    {"Authorization": f"Bearer {API_KEY}x"},
    {"Authorization": f"Basic {API_KEY}"},  # the right secret under another scheme
    {"Authorization": "Bearer"},
    {"Authorization": API_KEY},
    {"X-Api-Key": API_KEY.upper()},
], ids=["key prefix", "key plus one", "basic scheme", "bearer without a key", "no scheme", "wrong case"])
def test_a_near_miss_key_is_refused(keyed, headers):
    _assert_401(_call(keyed, ("GET", "/props", None), headers))


@pytest.mark.parametrize("headers", [
    {"Authorization": f"Bearer {API_KEY}"},
    {"authorization": f"bearer {API_KEY}"},
    {"X-Api-Key": API_KEY},
], ids=["bearer", "lower-case bearer", "x-api-key"])
@pytest.mark.parametrize("route", PROTECTED, ids=ROUTE_IDS)
def test_a_protected_route_serves_a_request_with_the_key(keyed, route, headers):
    r = _call(keyed, route, headers)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("route", PUBLIC, ids=[p for _, p, _ in PUBLIC])
def test_health_and_models_need_no_key(keyed, route):
    r = _call(keyed, route)
    assert r.status_code == 200, r.text


def test_an_unknown_route_asks_for_a_key_before_saying_it_does_not_exist(keyed):
    _assert_401(_call(keyed, ("GET", "/v1/secret-route", None)))
    r = _call(keyed, ("GET", "/v1/secret-route", None), {"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 404


def test_a_slot_action_needs_the_admin_key_when_one_is_set(keyed):
    _assert_401(_call(keyed, SLOT_ACTION), "--admin-api-key")
    _assert_401(_call(keyed, SLOT_ACTION, {"Authorization": f"Bearer {API_KEY}"}), "--admin-api-key")
    for headers in ({"Authorization": f"Bearer {ADMIN_KEY}"}, {"X-Api-Key": ADMIN_KEY}):
        r = _call(keyed, SLOT_ACTION, headers)
        assert r.status_code == 200, r.text
        assert r.json()["id_slot"] == 0


def test_a_slot_action_takes_the_api_key_when_there_is_no_admin_key(api_only):
    _assert_401(_call(api_only, SLOT_ACTION), "--api-key")
    _assert_401(_call(api_only, SLOT_ACTION, {"Authorization": f"Bearer {ADMIN_KEY}"}))
    r = _call(api_only, SLOT_ACTION, {"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200, r.text


def test_the_openai_sdk_authenticates_with_its_api_key(keyed):
    import openai

    good = openai.OpenAI(base_url=keyed.v1, api_key=API_KEY, max_retries=0, timeout=60)
    model = good.models.list().data[0].id
    resp = good.completions.create(model=model, prompt="hi", max_tokens=1)
    assert resp.usage.completion_tokens == 1
    bad = openai.OpenAI(base_url=keyed.v1, api_key="wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model=model, prompt="hi", max_tokens=1)


def test_health_and_models_answer_head_as_get_without_a_key_and_the_schema_names_each_route_once(keyed):
    for path in ("/health", "/v1/health", "/v1/models"):
        r = httpx.head(keyed.base_url + path, timeout=10)
        assert r.status_code == 200 and not r.content
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # FastAPI warns of operations sharing an id
        schema = keyed.app.openapi()
    assert set(schema["paths"]["/health"]) == {"get"}


def test_a_browsers_preflight_is_answered_without_the_key_and_a_keyed_call_carries_the_cors_header(keyed):
    origin = {"Origin": "http://localhost:5173"}
    preflight = httpx.options(keyed.base_url + "/v1/chat/completions", timeout=30, headers={
        **origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"})
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
    call = _call(keyed, ("GET", "/props", None), {**origin, "Authorization": f"Bearer {API_KEY}"})
    assert call.status_code == 200 and call.headers["access-control-allow-origin"] == "*"
    assert _call(keyed, ("GET", "/props", None), origin).status_code == 401, "CORS opens no route without its key"


def test_by_default_no_web_page_may_call_the_server(tiny_checkpoint):
    with live_server(tiny_checkpoint("qwen3")) as s:
        r = httpx.get(s.base_url + "/props", headers={"Origin": "http://localhost:5173"}, timeout=30)
        preflight = httpx.options(s.base_url + "/slots/0?action=erase", timeout=30, headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    assert "access-control-allow-origin" not in preflight.headers
