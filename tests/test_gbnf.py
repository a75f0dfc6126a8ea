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
