"""GBNF pieces written from Python (specllama.gbnf), against llama.cpp's grammar engine: the text
up to a closing tag, for tags whose start recurs in them too, against a plain string oracle; rule
names renamed apart keep a grammar's language."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specllama import gbnf, schemas

TAGS = ["</think>", "<channel|>", '<|"|>', "\n</parameter>\n", "abab", "aab", "aa"]


def _grammar(tag):
    return f"root ::= t-0 {gbnf.literal(tag)}\n" + "\n".join(gbnf.text_without("t", tag)) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(TAGS), st.data())
def test_text_up_to_a_tag_ends_at_its_first_occurrence(grammar_text, tag, data):
    """`t-0 "tag"` admits exactly a text whose first occurrence of tag is its end: texts drawn from
    the tag's own characters (and one other), so that near misses and overlaps are common."""
    pieces = st.sampled_from(sorted(set(tag)) + ["x", tag, tag[:-1], tag[1:]])
    text = "".join(data.draw(st.lists(pieces, max_size=8))) + tag
    want = text.find(tag) == len(text) - len(tag)
    assert grammar_text.admits(_grammar(tag), text) == want, repr(text)


TAG_SETS = [("</think>", "<tool_call>"), ("ab", "b"), ("abc", "bcd"), ("aa", "ab", "ba"), ("\n</x>\n", "<x>")]


def _first_end(text, tags):
    """Where the first occurrence of any of tags in text ends (len(text) + 1: none)."""
    return min((i + len(t) for i in range(len(text)) for t in tags if text.startswith(t, i)), default=len(text) + 1)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(TAG_SETS), st.data())
def test_text_without_several_tags_ends_at_the_first_of_them(grammar_text, tags, data):
    """With each tag's way on, t-0 admits exactly a text in which the first of the tags to occur
    ends at its end (none of them earlier): texts drawn from the tags' characters and pieces."""
    chars = sorted(set("".join(tags)))
    pieces = st.sampled_from(chars + ["x"] + [p for t in tags for p in (t, t[:-1], t[1:])])
    text = "".join(data.draw(st.lists(pieces, max_size=8))) + data.draw(st.sampled_from(tags))
    then = {t: f"{gbnf.literal(t)} end-{i}" for i, t in enumerate(tags)}  # (each tag's own way on)
    grammar = "root ::= t-0\n" + "\n".join(gbnf.text_without("t", tags, then)) + "\n" + \
        "".join(f'end-{i} ::= ""\n' for i in range(len(tags)))
    assert grammar_text.admits(grammar, text) == (_first_end(text, tags) == len(text)), repr(text)


@pytest.mark.parametrize("tag, text, admitted", [
    ("\n</parameter>\n", "value\n</parameter>\n", True),
    ("\n</parameter>\n", "\n</parameter>\n", True),
    ("\n</parameter>\n", "a\n</parameter>\n</parameter>\n", False),  # the first one ends it
    ("\n</parameter>\n", "a\n</parameter>\n\n</parameter>\n", False),
    ("\n</parameter>\n", "a\n</parameter\n</parameter>\n", True),
    ("aa", "aa", True), ("aa", "baa", True), ("aa", "aaa", False), ("aa", "abaa", True),
    ("abab", "ababab", False), ("abab", "abaabab", True), ("aab", "aaab", True), ("aab", "aaabaab", False),
])
def test_text_up_to_a_tag_on_examples(grammar_text, tag, text, admitted):
    assert grammar_text.admits(_grammar(tag), text) == admitted


def test_renamed_rules_keep_the_language(grammar_text):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer", "maximum": 9}},
              "required": ["name"]}
    rules = schemas.to_grammar(schema)
    both = (f"root ::= a-root | b-root\n{gbnf.renamed(rules, 'a-')}\n"
            f"{gbnf.renamed(schemas.to_grammar({'type': 'array', 'items': {'type': 'boolean'}}), 'b-')}\n")
    assert "\nroot ::=" not in both.split("\n", 1)[1]  # (every rule of the two was renamed)
    for value, admitted in [({"name": "x", "n": 3}, True), ({"name": "a \"b\" ]"}, True), ({"n": 3}, False),
                            ({"name": "x", "n": 10}, False), ([True, False], True), ([1], False)]:
        assert grammar_text.admits(both, json.dumps(value)) == admitted, value
    assert gbnf.renamed('x ::= "x ::= y" [a-z] y # y ::= x\ny ::= "y"', "p-") == \
        'p-x ::= "x ::= y" [a-z] p-y # y ::= x\np-y ::= "y"'
