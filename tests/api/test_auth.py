"""Who may call the API: tokens (hashed, revocable), roles, sessions with CSRF, docs page."""

import re

import pytest
from django.test import Client

from apps.api.models import ApiToken
from apps.api.tokens import digest, token_create, token_revoke
from tests.api.conftest import Api, assert_error

pytestmark = pytest.mark.django_db


def test_no_token_is_401_with_a_hint(anon_api):
    for path in ("/me", "/hosts", "/recipes", "/runs", "/jobs", "/suites"):
        response = anon_api.get(path)
        error = assert_error(response, 401, "unauthenticated")
        assert "Bearer" in error["message"]
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_unknown_and_malformed_tokens_are_401():
    for token in ("spk_" + "x" * 43, "not-a-token", "spk_", "spk_" + "y" * 500):
        assert_error(Api(token).get("/me"), 401, "unauthenticated")


def test_a_revoked_token_stops_working_at_once(member):
    row, clear = token_create(user=member, name="ci")
    api = Api(clear)
    assert api.get("/me").status_code == 200
    token_revoke(token=row)
    error = assert_error(api.get("/me"), 401)
    assert "revoked" in error["message"]


def test_a_deactivated_user_token_is_401(member):
    _, clear = token_create(user=member, name="ci")
    member.is_active = False
    member.save()
    assert_error(Api(clear).get("/me"), 401)


def test_only_a_digest_is_stored_and_last_use_is_recorded(member):
    row, clear = token_create(user=member, name="nightly")
    assert clear.startswith("spk_") and len(clear) > 40
    stored = ApiToken.objects.get(pk=row.pk)
    assert stored.digest == digest(clear) and clear not in stored.digest
    assert stored.prefix == clear[:12]
    assert stored.last_used_at is None
    Api(clear).get("/me")
    stored.refresh_from_db()
    assert stored.last_used_at is not None


def test_a_token_carries_its_users_role(member, operator, admin_user, api_as):
    assert api_as(member).get("/me").data["role"] == "member"
    me = api_as(operator).get("/me").data
    assert me["role"] == "operator" and "operate_runs" in me["permissions"]
    assert "manage_users" not in me["permissions"]
    assert api_as(admin_user).get("/me").data["role"] == "admin"


def test_an_account_without_a_role_is_403_everywhere(outsider, api_as):
    api = api_as(outsider)
    for path in ("/me", "/hosts", "/recipes", "/jobs"):
        error = assert_error(api.get(path), 403, "forbidden")
        assert "no role" in error["message"]


def test_a_session_works_but_unsafe_methods_need_csrf(member):
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    assert client.get("/api/v1/me").status_code == 200
    response = client.post(
        "/api/v1/planner", data={"max_model_len": 8192}, content_type="application/json"
    )
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]


def test_tokens_need_no_csrf(member, api_as):
    response = api_as(member).post(
        "/planner", {"gpu_memory_utilization": 0.8, "max_model_len": 8192, "max_num_seqs": 1}
    )
    assert response.status_code == 200


def test_schema_and_docs_need_a_login(member, client_as):
    anon = Client()
    assert anon.get("/api/v1/openapi.json").status_code == 401
    docs = anon.get("/api/v1/docs")
    assert docs.status_code == 302 and "/accounts/login/" in docs["Location"]
    page = client_as(member).get("/api/v1/docs")
    assert page.status_code == 200
    assert b"/static/ninja/swagger-ui-bundle.js" in page.content  # served locally, no CDN
    assert b"cdn." not in page.content
    _, clear = token_create(user=member, name="schema")
    schema = Client().get("/api/v1/openapi.json", headers={"Authorization": f"Bearer {clear}"})
    assert schema.status_code == 200 and schema.json()["info"]["title"] == "SparkPanel API"


def test_unknown_api_paths_are_json_404_not_the_login_page(anon_api):
    response = Client().get("/api/v2/anything")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_profile_creates_shows_once_and_revokes(member, client_as):
    client = client_as(member)
    created = client.post("/accounts/profile/", {"name": "laptop"}, follow=True)
    [(url, status)] = created.redirect_chain
    assert status == 302 and re.fullmatch(r"/accounts/profile/\?shown=[\w-]+#tokens", url)
    assert created.status_code == 200
    clear = created.context["new_token"]
    assert clear.encode() in created.content
    assert created["Cache-Control"] == "no-store"
    page = client.get("/accounts/profile/")
    assert clear.encode() not in page.content  # shown once
    assert clear[:12].encode() in page.content  # recognisable by its start
    assert Api(clear).get("/me").status_code == 200
    row = ApiToken.objects.get(user=member)
    client.post(f"/accounts/profile/tokens/{row.pk}/revoke/")
    assert Api(clear).get("/me").status_code == 401


def test_profile_token_needs_a_name_and_one_cannot_revoke_anothers(member, operator, client_as):
    response = client_as(member).post("/accounts/profile/", {"name": ""})
    assert response.status_code == 400 and not ApiToken.objects.exists()
    theirs, clear = token_create(user=operator, name="theirs")
    assert (
        client_as(member).post(f"/accounts/profile/tokens/{theirs.pk}/revoke/").status_code == 404
    )
    assert Api(clear).get("/me").status_code == 200


def test_profile_page_requires_login():
    response = Client().get("/accounts/profile/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_admin_sees_and_revokes_tokens_but_never_secrets(admin_user, member, client_as):
    from apps.api.models import Webhook

    row, clear = token_create(user=member, name="ci")
    hook = Webhook.objects.create(user=member, url="http://127.0.0.1:9/hook", secret="s3cr3t-xyz",
                                  events=["job.finished"])  # fmt: skip
    client = client_as(admin_user)
    for path in ("/admin/api/apitoken/", f"/admin/api/webhook/{hook.pk}/change/",
                 "/admin/api/webhookdelivery/"):  # fmt: skip
        page = client.get(path)
        assert page.status_code == 200, path
        assert b"s3cr3t-xyz" not in page.content and clear.encode() not in page.content
    client.post("/admin/api/apitoken/", {"action": "revoke", "_selected_action": [row.pk]})
    assert_error(Api(clear).get("/me"), 401)
