"""R2: markdown that renders. Replies are CardKit JSON 2.0 cards with one markdown element (or text, per bot);
long answers are split on block boundaries, never inside a code fence; a fence longer than a chunk is cut and
re-fenced on both sides; each chunk goes out as its own message."""

import json

import pytest

from feishu.outbound import sends as feishu_sends
from feishu.outbound.cards import (
    MARKDOWN_ELEMENT_ID,
    markdown_card,
    markdown_chunks,
    open_fence,
    reply_contents,
)
from tests.stubs.feishu_server import card_json_problem

LIMIT = 200


def _fence_balanced(chunk: str) -> bool:
    return open_fence(chunk) == ""


def test_r2_a_short_answer_is_one_chunk_unchanged():
    # given
    text = "# Title\n\n- one\n- **two**"
    # when / then
    assert markdown_chunks(text, limit=LIMIT) == [text]


def test_r2_chunks_break_between_blocks_never_inside_a_paragraph_or_list():
    # given: three blocks that fit two by two in no chunk
    heading = "## Plan"
    items = "\n".join(f"- step {n} with **bold** text" for n in range(5))  # 159 characters
    paragraph = "A closing paragraph " * 4
    text = f"{heading}\n\n{items}\n\n{paragraph.strip()}"
    # when
    chunks = markdown_chunks(text, limit=LIMIT)
    # then: headings, lists and bold survive whole; the list is not cut
    assert chunks == [f"{heading}\n\n{items}", paragraph.strip()]


def test_r2_a_code_fence_is_never_split_when_it_fits_in_a_chunk():
    # given: the fence would straddle the limit if cut by lines
    prose = "word " * 30
    fence = "```python\n" + "\n".join(f"x{n} = {n}" for n in range(12)) + "\n```"
    text = f"{prose.strip()}\n\n{fence}\n\nafter"
    # when
    chunks = markdown_chunks(text, limit=LIMIT)
    # then
    assert chunks == [prose.strip(), f"{fence}\n\nafter"]
    assert all(_fence_balanced(chunk) for chunk in chunks)


@pytest.mark.parametrize("opening", ["```python", "```c++", "~~~", "````md"])
def test_r2_a_fence_longer_than_a_chunk_is_split_and_refenced_on_both_sides(opening):
    # given: 40 code lines, about three chunks long, with an info string the SDK's splitter does not know
    closing = opening.rstrip("+pythonmdc")
    code = [f"line_{n:02d} = compute({n})" for n in range(40)]
    text = "Intro.\n\n" + "\n".join([opening, *code, closing]) + "\n\nOutro."
    # when
    chunks = markdown_chunks(text, limit=LIMIT)
    # then: every chunk fits, every chunk's fences are balanced, each code piece reopens with the same line
    assert all(len(chunk) <= LIMIT for chunk in chunks)
    assert all(_fence_balanced(chunk) for chunk in chunks)
    code_chunks = [chunk for chunk in chunks if opening in chunk]
    assert len(code_chunks) >= 3
    for chunk in code_chunks:
        fenced = chunk[chunk.index(opening) :].split("\n\n")[0]  # the code has no blank line
        assert fenced.startswith(opening + "\n") and fenced.endswith("\n" + closing)
    # and no code line is lost, duplicated or reordered
    seen = [line for chunk in chunks for line in chunk.split("\n") if line.startswith("line_")]
    assert seen == code
    assert chunks[0].startswith("Intro.") and chunks[-1].endswith("Outro.")


def test_r2_a_line_longer_than_a_chunk_is_cut_at_a_space():
    # given
    text = " ".join(f"w{n}" for n in range(150))
    # when
    chunks = markdown_chunks(text, limit=LIMIT)
    # then
    assert all(len(chunk) <= LIMIT for chunk in chunks)
    assert " ".join(chunks).split() == text.split()


def test_r2_markdown_card_is_valid_cardkit_json_2_with_one_markdown_element():
    # when
    card = markdown_card(text="# Hi\n\n**bold**", summary="Hi bold")
    # then
    assert card_json_problem(card) == ""
    assert card["schema"] == "2.0"
    assert card["config"]["summary"] == {"content": "Hi bold"}
    assert card["body"]["elements"] == [
        {"tag": "markdown", "element_id": MARKDOWN_ELEMENT_ID, "content": "# Hi\n\n**bold**"}
    ]


def test_r2_a_long_markdown_answer_reaches_the_stub_as_valid_cards_each_with_its_own_uuid(
    db, feishu_stub, make_feishu_bot
):
    # given: an answer of about three cards with headings, a list, bold and a long fence
    bot = make_feishu_bot()
    code = "\n".join(f"    value_{n} = {n} * 2" for n in range(400))
    text = f"# Report\n\n- **first** point\n- second point\n\n```python\n{code}\n```\n\n## End\n\nDone."
    contents = reply_contents(text=text, reply_format="markdown_card")
    # when
    for index, content in enumerate(contents):
        feishu_sends.message_reply_content(
            bot=bot,
            message_id="om_src",
            msg_type=content.msg_type,
            content=content.content,
            uuid=f"u-{index}",
            reply_in_thread=True,
        )
    # then
    assert len(contents) >= 2
    sent = feishu_stub.sent
    assert [message["uuid"] for message in sent] == [f"u-{index}" for index in range(len(contents))]
    cards = [json.loads(message["content"]) for message in sent]
    assert [card_json_problem(card) for card in cards] == [""] * len(cards)
    texts = [card["body"]["elements"][0]["content"] for card in cards]
    assert texts[0].startswith("# Report\n\n- **first** point\n- second point")
    assert texts[-1].endswith("## End\n\nDone.")
    assert all(_fence_balanced(t) for t in texts)
    assert [line for t in texts for line in t.split("\n") if "value_" in line] == code.split("\n")


def test_r2_text_format_sends_plain_text_messages():
    # when
    [content] = reply_contents(text="**not rendered**", reply_format="text")
    # then
    assert (content.msg_type, content.content) == ("text", {"text": "**not rendered**"})


def test_r2_a_bot_replies_as_a_markdown_card_unless_set_to_text(db, make_feishu_bot):
    # when
    bot = make_feishu_bot()
    # then: the defaults the admin shows (R1's receipt emoji too)
    assert (bot.reply_format, bot.receipt_emoji, bot.failure_emoji) == ("markdown_card", "OnIt", "CrossMark")
