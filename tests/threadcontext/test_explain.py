"""Decisions (C11) and explain (C12): the real command's stdout, the API, the admin explain page."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.urls import reverse

from tests.agents.factories import staff_user
from tests.threadcontext.conftest import CHAT_ID, CODER, PLANNER, ROOT_ID, inbound, workspace_create
from threadcontext.explain import display_width, text_table
from threadcontext.models import ThreadContextDecision, Workspace
from threadcontext.rendering import prompt_render
from threadcontext.selectors import ContextRequest, context_package_build
from threadcontext.services import (
    context_decision_record,
    thread_event_record_agent_output,
    thread_event_record_inbound,
)

pytestmark = pytest.mark.django_db


def decide(bot: dict, request_text: str, *, message_id: str, workspace=None) -> ThreadContextDecision:
    """The turn's real sequence: record the @ request, build the package, render, record the decision."""
    workspace = workspace or workspace_create(bot)
    outcome = thread_event_record_inbound(
        message=inbound(bot, request_text, message_id=message_id, addressed=True), workspace=workspace
    )
    package = context_package_build(
        request=ContextRequest(
            workspace=workspace,
            bridge_id=bot["bridge_id"],
            bot_profile=bot["bot_profile"],
            chat_id=CHAT_ID,
            root_msg_id=ROOT_ID,
            message_id=message_id,
            request_text=outcome.request_text,
        )
    )
    prompt = prompt_render(request_text=outcome.request_text, package=package)
    return context_decision_record(package=package, prompt_preview=prompt)


@pytest.fixture
def scenario() -> dict:
    coder_workspace = workspace_create(CODER)
    thread_event_record_inbound(
        message=inbound(CODER, "我想做一个 H5 贪吃蛇游戏", message_id=ROOT_ID), workspace=coder_workspace
    )
    thread_event_record_agent_output(
        **PLANNER, chat_id=CHAT_ID, root_msg_id=ROOT_ID, message_id="om_plan", text="# 方案", session_name="planner-h5"
    )
    thread_event_record_agent_output(
        **CODER,
        chat_id=CHAT_ID,
        root_msg_id=ROOT_ID,
        message_id="om_mine",
        text="earlier coder answer",
        session_name="c",
    )
    first = decide(CODER, "first request", message_id="om_req_1", workspace=coder_workspace)
    latest = decide(CODER, "根据上述方案，实现这个游戏", message_id="om_req_2", workspace=coder_workspace)
    return {"first": first, "latest": latest}


def explain(*args: str) -> str:
    out = io.StringIO()
    call_command("feishu_context_explain", *args, stdout=out)
    return out.getvalue()


def test_c11_decision_holds_request_context_selected_excluded_diagnostics_and_prompt(scenario):
    decision = scenario["latest"]
    assert decision.request_text == "根据上述方案，实现这个游戏"
    assert decision.thread_context == "Alice: 我想做一个 H5 贪吃蛇游戏\nplanner/planner-h5: # 方案"
    assert len(decision.selected_item_ids) == 2
    assert [(item["source"], item["reason"]) for item in decision.excluded] == [("coder/c", "own_output")]
    assert decision.diagnostics["selected"] == 2
    assert decision.diagnostics["prompt_chars"] == len(decision.prompt_preview)
    assert decision.prompt_preview.startswith("[Amux Feishu Thread Mode]\n")
    assert decision.workspace_mode == "shared"


def test_c12_explain_summary_shows_the_latest_decision_as_a_table(scenario):
    decision = scenario["latest"]
    output = explain(ROOT_ID, "--profile", "coder")
    lines = output.splitlines()
    assert lines[:9] == [
        "profile:       coder",
        "bridge_id:     cli_coder",
        f"decision_id:   {decision.pk}",
        f"root_msg_id:   {ROOT_ID}",
        "message_id:    om_req_2",
        "mode:          shared",
        "request_text:  根据上述方案，实现这个游戏",
        f"context chars: {len(decision.thread_context)}",
        f"prompt chars:  {len(decision.prompt_preview)}",
    ]
    table_start = lines.index("selected items (2):")
    assert lines[table_start + 1].split() == ["id", "type", "source", "reason", "chars", "preview"]
    assert lines[table_start + 3].split()[1:5] == [
        "topic_root",
        "Alice",
        "recent",  # issue 25: why it was selected (a pinned item says "pinned")
        str(len("Alice: 我想做一个 H5 贪吃蛇游戏") + 1),
    ]
    assert lines[table_start + 4].split()[1:3] == ["agent_output", "planner/planner-h5"]
    excluded_start = lines.index("excluded items (1):")
    assert lines[excluded_start + 3].split()[1:4] == ["agent_output", "coder/c", "own_output"]
    assert "prompt preview:" not in output
    assert "[Amux Feishu Thread Mode]" not in output


def test_c12_explain_verbose_adds_the_thread_context_and_prompt_preview(scenario):
    decision = scenario["latest"]
    output = explain(ROOT_ID, "--profile", "coder", "--verbose")
    assert f"thread context:\n{decision.thread_context}\n" in output
    assert output.endswith(f"prompt preview:\n{decision.prompt_preview}\n")


def test_c12_explain_picks_a_decision_by_message_id_or_decision_id(scenario):
    first = scenario["first"]
    assert f"decision_id:   {first.pk}\n" in explain(ROOT_ID, "--profile", "coder", "--message-id", "om_req_1")
    assert f"decision_id:   {first.pk}\n" in explain(ROOT_ID, "--decision-id", str(first.pk))
    # without --profile the only profile with decisions on this root is used
    assert f"decision_id:   {scenario['latest'].pk}\n" in explain(ROOT_ID)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["om_missing"], "No context decision recorded for root om_missing."),
        ([ROOT_ID, "--profile", "nobody"], f"No context decision for root {ROOT_ID} and profile nobody"),
        ([ROOT_ID, "--decision-id", "999999"], "No context decision with id 999999."),
        ([ROOT_ID, "--profile", "coder", "--message-id", "om_x"], "and message om_x."),
    ],
)
def test_c12_explain_missing_root_profile_or_decision_is_a_clear_command_error(scenario, args, message):
    with pytest.raises(CommandError, match=message.replace(".", r"\.")):
        explain(*args)


@pytest.mark.django_db(transaction=True)
def test_c12_explain_failure_exits_non_zero_with_the_message_on_stderr_and_no_traceback(capsys):
    # given: an empty store; when: the command runs as from a shell
    from django.core.management import ManagementUtility

    with pytest.raises(SystemExit) as exit_info:
        ManagementUtility(["manage.py", "feishu_context_explain", "om_nothing"]).execute()
    # then
    captured = capsys.readouterr()
    assert exit_info.value.code == 1
    assert captured.err == "CommandError: No context decision recorded for root om_nothing.\n"
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_c12_explain_asks_for_a_profile_when_several_bots_decided_on_the_root(scenario):
    decide(PLANNER, "planner request", message_id="om_req_p")
    with pytest.raises(CommandError, match=r"several profiles \(coder, planner\); pass --profile"):
        explain(ROOT_ID)


# --- API -------------------------------------------------------------------------------------------------------


@pytest.fixture
def staff(api_client):
    api_client.force_authenticate(staff_user("staff", "threadcontext.view_threadcontextdecision"))  # U6
    return api_client


@pytest.fixture
def member(api_client):
    user = get_user_model().objects.create_user("alice", password="x")
    api_client.force_authenticate(user)
    return api_client


def owns_coder(user, bot_profile: str) -> bool:
    return user.username == "alice" and bot_profile == "coder"


def test_c12_api_lists_decisions_for_root_and_profile_newest_first(scenario, staff):
    response = staff.get(reverse("api:threadcontext:decisions"), {"root_msg_id": ROOT_ID, "profile": "coder"})
    assert response.status_code == 200
    body = response.json()
    assert [row["decision_id"] for row in body] == [scenario["latest"].pk, scenario["first"].pk]
    latest = body[0]
    assert latest["request_text"] == "根据上述方案，实现这个游戏"
    assert [item["source"] for item in latest["selected"]] == ["Alice", "planner/planner-h5"]
    assert [item["reason"] for item in latest["excluded"]] == ["own_output"]
    assert latest["prompt_preview"] == scenario["latest"].prompt_preview


def test_c12_api_detail_shows_one_decision(scenario, staff):
    decision = scenario["first"]
    response = staff.get(reverse("api:threadcontext:decision", args=[decision.pk]))
    assert response.status_code == 200
    assert (response.json()["decision_id"], response.json()["message_id"]) == (decision.pk, "om_req_1")


def test_c12_api_unknown_decision_is_a_404_json_body(staff):
    response = staff.get(reverse("api:threadcontext:decision", args=[424242]))
    assert response.status_code == 404
    assert response.json() == {"message": "No context decision with id 424242.", "extra": {"decision_id": 424242}}


def test_c12_api_bad_filter_is_a_400_json_body(staff):
    response = staff.get(reverse("api:threadcontext:decisions"), {"profile": "not a slug!"})
    assert response.status_code == 400
    assert response.json()["message"] == "Validation error"
    assert "profile" in response.json()["extra"]["fields"]


def test_c12_api_refuses_non_staff_without_an_ownership_check(scenario, member):
    response = member.get(reverse("api:threadcontext:decisions"), {"root_msg_id": ROOT_ID, "profile": "coder"})
    assert response.status_code == 403
    assert set(response.json()) == {"message", "extra"}


@override_settings(AMUX_CONTEXT_DECISION_ACCESS_CHECK="tests.threadcontext.test_explain.owns_coder")
def test_c12_api_lets_the_bots_owner_read_its_decisions_and_nothing_else(scenario, member):
    own = member.get(reverse("api:threadcontext:decisions"), {"root_msg_id": ROOT_ID, "profile": "coder"})
    other = member.get(reverse("api:threadcontext:decisions"), {"root_msg_id": ROOT_ID, "profile": "planner"})
    unfiltered = member.get(reverse("api:threadcontext:decisions"))
    detail = member.get(reverse("api:threadcontext:decision", args=[scenario["first"].pk]))
    assert (own.status_code, len(own.json())) == (200, 2)
    assert (other.status_code, unfiltered.status_code, detail.status_code) == (403, 403, 200)


@override_settings(AMUX_CONTEXT_DECISION_ACCESS_CHECK="tests.threadcontext.test_explain.owns_coder")
def test_c12_api_detail_of_another_bots_decision_is_the_same_404_as_a_missing_id(scenario, member):
    # given a decision of planner, a bot alice does not own
    theirs = ThreadContextDecision.objects.create(
        chat_id=CHAT_ID, root_msg_id=ROOT_ID, bridge_id=PLANNER["bridge_id"], bot_profile="planner"
    )
    missing_id = theirs.pk + 1000

    # when
    response = member.get(reverse("api:threadcontext:decision", args=[theirs.pk]))
    missing = member.get(reverse("api:threadcontext:decision", args=[missing_id]))

    # then: she cannot tell it from an id that does not exist (ids do not leak)
    assert (response.status_code, missing.status_code) == (404, 404)
    assert response.json() == {
        "message": f"No context decision with id {theirs.pk}.",
        "extra": {"decision_id": theirs.pk},
    }
    assert missing.json() == {
        "message": f"No context decision with id {missing_id}.",
        "extra": {"decision_id": missing_id},
    }


def test_c12_api_needs_authentication(scenario, api_client):
    list_response = api_client.get(reverse("api:threadcontext:decisions"))
    detail_response = api_client.get(reverse("api:threadcontext:decision", args=[scenario["latest"].pk]))

    for response in (list_response, detail_response):
        assert response.status_code == 401
        assert response.json() == {"message": "Authentication credentials were not provided.", "extra": {}}


# --- admin -----------------------------------------------------------------------------------------------------


@pytest.fixture
def admin_browser(client):
    user = get_user_model().objects.create_superuser("root", "root@example.com", "x")
    client.force_login(user)
    return client


def test_c12_admin_decision_list_links_to_the_explain_page_and_filters_by_workspace_and_root(scenario, admin_browser):
    decision = scenario["latest"]
    coder_workspace = Workspace.objects.get(bot_profile="coder")
    changelist = reverse("admin:threadcontext_threadcontextdecision_changelist")
    explain_url = reverse("admin:threadcontext_threadcontextdecision_explain", args=[decision.pk])
    by_workspace = admin_browser.get(changelist, {"workspace": coder_workspace.pk})
    by_root = admin_browser.get(changelist, {"root_msg_id": "om_elsewhere"})
    assert by_workspace.status_code == 200
    assert explain_url in by_workspace.content.decode()
    assert by_workspace.context["cl"].result_count == 2
    assert by_root.context["cl"].result_count == 0


@pytest.mark.parametrize(
    "query",
    [
        {"root_msg_id": "om_nothing"},
        {"workspace": "abc"},
        {"workspace": "99999999999999999999999"},
        {"workspace": "-1"},
    ],
)
def test_c12_admin_decision_filters_with_bad_values_list_nothing(scenario, admin_browser, query):
    # given decisions exist; when the list is filtered by a root or workspace no decision can have
    response = admin_browser.get(reverse("admin:threadcontext_threadcontextdecision_changelist"), query)

    # then (a non-numeric workspace used to end in the admin's "?e=1" error redirect)
    assert response.status_code == 200
    assert response.context["cl"].result_count == 0


def test_c12_admin_explain_page_shows_selected_excluded_diagnostics_and_prompt(scenario, admin_browser):
    decision = scenario["latest"]
    response = admin_browser.get(reverse("admin:threadcontext_threadcontextdecision_explain", args=[decision.pk]))
    page = response.content.decode()
    assert response.status_code == 200
    assert "planner/planner-h5" in page
    assert "own_output" in page
    assert "trimmed_by_char_budget" in page
    assert "[Amux Feishu Thread Mode]" in page


@pytest.mark.parametrize(
    "model", ["workspace", "threadevent", "threadcontextitem", "threadcontextdecision", "sessionbinding"]
)
def test_admin_changelists_render(scenario, admin_browser, model):
    assert admin_browser.get(reverse(f"admin:threadcontext_{model}_changelist")).status_code == 200


def test_c12_explain_table_columns_line_up_with_chinese_sources():
    lines = text_table(["source", "chars"], [["Alice 的 Planner", "12"], ["Bob", "3"]])
    assert display_width("Alice 的 Planner") == 16
    assert lines == [
        "source            chars",
        "----------------  -----",
        "Alice 的 Planner  12",
        "Bob               3",
    ]
