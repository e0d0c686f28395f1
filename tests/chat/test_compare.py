"""Side by side and the arena, server side: starting a comparison, votes and who may cast
them, bad input answered clearly, and the arena's count per pair of recipes."""

import pytest
from django.urls import reverse

from apps.chat.arena import table, tally
from apps.chat.models import ArenaVote, Comparison, Message
from apps.chat.sides import TIE, side, verdict
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(qwen):
    other = Recipe.objects.get(pk=qwen.pk)
    other.pk = other.id = None
    other.name, other.slug = "Qwen other", "qwen-other"
    other.save()
    third = Recipe.objects.get(pk=qwen.pk)
    third.pk = third.id = None
    third.name, third.slug = "Qwen third", "qwen-third"
    third.save()
    return [_ready(r, i) for i, r in enumerate((qwen, other, third))]


def _ready(recipe, i: int) -> Run:
    # One active run per host: a host each.
    host = Host.objects.create(name=f"compare-{i}", engine="process", simulated=True)
    return Run.objects.create(recipe=recipe, host=host, port=20010 + i, image="x",
                              state=RunState.READY)  # fmt: skip


def _answer(conversation, question="q", status=Message.Status.COMPLETE):
    Message.objects.create(conversation=conversation, role="user", content=question)
    Message.objects.create(conversation=conversation, role="assistant", content="a", status=status)


def test_a_comparison_is_one_conversation_per_picked_run_in_order(client_as, member, runs):
    client = client_as(member)
    response = client.post(reverse("chat-compare-new"), {"runs": [runs[1].pk, runs[0].pk]})
    comparison = Comparison.objects.get(user=member)
    assert response.url == comparison.get_absolute_url()
    columns = list(comparison.columns.order_by("column"))
    assert [(c.column, c.run_id, c.user_id) for c in columns] == [
        (0, runs[1].pk, member.pk), (1, runs[0].pk, member.pk),
    ]  # fmt: skip
    html = client.get(comparison.get_absolute_url()).content.decode()
    for column in columns:
        assert f'data-ws="/ws/chat/{column.pk}/"' in html
    assert "A · Qwen other" in html
    index = client.get(reverse("chat")).content.decode()  # listed to find it again
    assert f'href="{comparison.get_absolute_url()}"' in index


@pytest.mark.parametrize(
    "picked, message",
    [
        ([], "Pick two or three"),
        (["one"], "Pick two or three"),
        (["SAME", "SAME"], "Pick two or three"),  # the same run twice is one run
        (["A", "B", "C", "99999"], "Pick two or three"),
        (["A", "99999"], "Not ready: run 99999"),
        (["A", "9" * 30], "Pick two or three"),  # an id too big for the database is junk
        (["A", "²"], "Pick two or three"),
    ],
)
def test_bad_picks_are_refused_with_a_reason_and_create_nothing(
    client_as, member, runs, picked, message
):
    ids = {"A": runs[0].pk, "B": runs[1].pk, "C": runs[2].pk, "SAME": runs[0].pk}
    values = [str(ids.get(p, p)) for p in picked]
    response = client_as(member).post(reverse("chat-compare-new"), {"runs": values}, follow=True)
    assert message in response.content.decode()
    assert not Comparison.objects.exists()


def test_four_runs_are_too_many(client_as, member, runs, qwen):
    fourth = _ready(qwen, 3)
    picked = [r.pk for r in runs] + [fourth.pk]
    response = client_as(member).post(reverse("chat-compare-new"), {"runs": picked}, follow=True)
    assert "Pick two or three" in response.content.decode()
    assert not Comparison.objects.exists()


def test_a_stopped_run_cannot_be_compared(client_as, member, runs):
    Run.objects.filter(pk=runs[1].pk).update(state=RunState.STOPPED)
    response = client_as(member).post(
        reverse("chat-compare-new"), {"runs": [runs[0].pk, runs[1].pk]}, follow=True
    )
    assert f"Not ready: run {runs[1].pk}" in response.content.decode()


def test_votes_are_per_turn_changeable_and_only_by_who_asked(
    client_as, member, operator, admin_user, runs
):
    client = client_as(member)
    client.post(reverse("chat-compare-new"), {"runs": [runs[0].pk, runs[1].pk]})
    comparison = Comparison.objects.get()
    url = reverse("chat-compare-vote", args=[comparison.pk])
    a, b = comparison.columns.order_by("column")
    assert client.post(url, {"turn": 1, "winner": "A"}).json() == {
        "error": "turn 1 has no answers in every column yet"
    }
    _answer(a, "which is faster?")
    _answer(b, "which is faster?", status=Message.Status.STREAMING)
    assert client.post(url, {"turn": 1, "winner": "A"}).status_code == 400  # B still streams
    Message.objects.filter(conversation=b, role="assistant").update(status="complete")
    assert client.post(url, {"turn": 1, "winner": "b"}).json() == {"turn": 1, "winner": "B"}
    assert client.post(url, {"turn": 1, "winner": "tie"}).json() == {"turn": 1, "winner": "tie"}
    vote = ArenaVote.objects.get()  # changed, not added
    assert (vote.winner_column, vote.recipes, vote.prompt) == (
        None, [runs[0].recipe_id, runs[1].recipe_id], "which is faster?"
    )  # fmt: skip
    for bad in ({"turn": "x", "winner": "A"}, {"turn": 1, "winner": "C"},
                {"turn": 2, "winner": "A"}, {"turn": 0, "winner": "A"}, {}):  # fmt: skip
        response = client.post(url, bad)
        assert response.status_code == 400 and response.json()["error"]
    # Another member cannot see it; an admin can read it but not vote.
    assert client_as(operator).post(url, {"turn": 1, "winner": "A"}).status_code == 404
    assert client_as(admin_user).post(url, {"turn": 1, "winner": "A"}).status_code == 403
    assert client_as(admin_user).get(comparison.get_absolute_url()).status_code == 200
    assert ArenaVote.objects.get().winner_column is None


def test_settings_apply_to_every_column(client_as, member, runs):
    client = client_as(member)
    client.post(reverse("chat-compare-new"), {"runs": [runs[0].pk, runs[1].pk, runs[2].pk]})
    comparison = Comparison.objects.get()
    url = reverse("chat-compare-settings", args=[comparison.pk])
    settings = {"system_prompt": "Be terse.", "temperature": 0.2, "top_p": 0.9, "max_tokens": 64}
    client.post(url, settings)
    assert set(comparison.columns.values_list("system_prompt", "max_tokens")) == {("Be terse.", 64)}
    response = client.post(url, {**settings, "temperature": 9, "system_prompt": "x"}, follow=True)
    assert "Settings not saved" in response.content.decode()
    assert set(comparison.columns.values_list("system_prompt", flat=True)) == {"Be terse."}


def test_the_arena_counts_wins_per_pair_of_recipes():
    # Two columns: a win each way and a tie; three columns: the winner beats both others,
    # the two others are not compared; a column without a recipe or a recipe against itself
    # counts for nothing.
    records = tally([
        ([1, 2], 0), ([2, 1], 0), ([1, 2], None),
        ([1, 2, 3], 2),
        ([1, None], 0), ([4, 4], 1),
    ])  # fmt: skip
    found = {(r.a, r.b): (r.a_wins, r.b_wins, r.ties) for r in records}
    assert found == {(1, 2): (1, 1, 1), (1, 3): (0, 1, 0), (2, 3): (0, 1, 0)}
    assert records[0].a_share() == pytest.approx(0.5)


def test_the_arena_page_names_recipes_and_keeps_votes_of_deleted_ones(client_as, member, runs):
    comparison = Comparison.objects.create(user=member)
    ArenaVote.objects.create(comparison=comparison, turn=1, winner_column=1,
                             recipes=[runs[0].recipe_id, runs[1].recipe_id])  # fmt: skip
    gone = Recipe.objects.get(pk=runs[0].recipe_id)
    gone.pk = gone.id = None
    gone.name, gone.slug = "Gone recipe", "gone-recipe"
    gone.save()
    ArenaVote.objects.create(comparison=comparison, turn=2, winner_column=0,
                             recipes=[gone.pk, runs[1].recipe_id])  # fmt: skip
    gone_pk = gone.pk
    gone.delete()
    pairs = {(p.a_name, p.b_name): (p.a_wins, p.b_wins) for p in table()}
    assert pairs[(runs[0].recipe.name, "Qwen other")] == (0, 1)
    assert (f"recipe {gone_pk} (deleted)", "Qwen other") in pairs or (
        "Qwen other",
        f"recipe {gone_pk} (deleted)",
    ) in pairs
    html = client_as(member).get(reverse("chat-arena")).content.decode()
    assert "Qwen other" in html and "deleted" in html


def test_the_compare_page_and_the_arena_call_answers_and_votes_by_the_same_names(
    client_as, member, runs
):
    # One set of names: A, B, C left to right; a vote "B is better" or "Tie".
    assert [side(0), side(1), verdict(1), verdict(None)] == ["A", "B", "B is better", "Tie"]
    client = client_as(member)
    client.post(reverse("chat-compare-new"), {"runs": [runs[0].pk, runs[1].pk]})
    comparison = Comparison.objects.get()
    for column in comparison.columns.all():
        _answer(column, "which is faster?")
    url = reverse("chat-compare-vote", args=[comparison.pk])
    assert client.post(url, {"turn": 1, "winner": side(1)}).json()["winner"] == side(1)

    page = client.get(comparison.get_absolute_url()).content.decode()
    for column, recipe in enumerate((runs[0].recipe, runs[1].recipe)):
        assert f'data-column="{side(column)}"' in page and f"{side(column)} · {recipe}" in page
        assert f'data-vote="{side(column)}" disabled>{verdict(column)}</button>' in page
    assert f'data-vote="tie" disabled>{TIE}</button>' in page

    arena = client.get(reverse("chat-arena")).content.decode()
    assert f"turn 1: {verdict(1)}</li>" in arena
    assert "column 2" not in arena and "Recipe A" not in arena  # no other names for them
    client.post(url, {"turn": 1, "winner": "tie"})
    assert f"turn 1: {TIE}</li>" in client.get(reverse("chat-arena")).content.decode()


def test_a_send_before_the_script_loaded_posts_and_gets_the_prompt_back_in_its_box(
    client_as, member, operator, admin_user, runs
):
    client = client_as(member)
    client.post(reverse("chat-compare-new"), {"runs": [runs[0].pk, runs[1].pk]})
    comparison = Comparison.objects.get()
    url = reverse("chat-compare-send", args=[comparison.pk])
    page = client.get(comparison.get_absolute_url()).content.decode()
    assert f'<form id="compare-send" class="chat-form card" method="post" action="{url}">' in page

    response = client.post(url, {"content": "a secret <b>prompt</b>"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Not sent yet" in html and "press Send again" in html
    assert "a secret &lt;b&gt;prompt&lt;/b&gt;</textarea>" in html  # back in the box, escaped
    assert not Message.objects.exists()  # nothing sent or saved from here
    assert client.get(url).status_code == 405
    # Only the owner: someone else's is not found; an admin reads it but may not write.
    assert client_as(operator).post(url, {"content": "x"}).status_code == 404
    assert client_as(admin_user).post(url, {"content": "x"}).status_code == 403
