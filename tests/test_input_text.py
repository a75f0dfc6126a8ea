"""Text from anywhere: bytes that are not UTF-8, NUL bytes, thread counts beyond the machine, and
prompts far beyond the context each get a clear outcome in the CLI and the Python API."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specllama
from specllama import _core

ROOT = Path(specllama.__file__).parent.parent


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT))


def _cli(args, stdin=b"", tmp_path=None):
    """specllama as a user runs it, with arguments and standard input as raw bytes."""
    r = subprocess.run([sys.executable.encode(), b"-m", b"specllama", *args], input=stdin, capture_output=True,
                       timeout=300, env=_env(), cwd=tmp_path)
    return r.returncode, r.stdout, r.stderr.decode("utf-8", "replace")


def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("specllama: ")]
    assert len(lines) == 1, err
    assert "incompatible function arguments" not in err and "Traceback" not in err
    return lines[0]


# -- bytes that are not UTF-8 -----------------------------------------------------------------

@pytest.mark.parametrize("args, stdin, where", [
    ([b"generate"], b"\xff\xfe hello", "standard input is not valid UTF-8: byte 0xFF at offset 0"),
    ([b"generate", b"caf\xe9"], b"", "the prompt is not valid UTF-8: byte 0xE9 at offset 3"),
    ([b"generate", b"hi", b"--stop", b"\xe9t\xe9"], b"", "--stop is not valid UTF-8: byte 0xE9 at offset 0"),
    ([b"generate", b"hi", b"--chat", b"--system", b"\xc3("], b"", "--system is not valid UTF-8: byte 0xC3 at offset 0"),
])
def test_cli_refuses_bytes_that_are_not_utf8(tiny, tmp_path, args, stdin, where):
    code, out, err = _cli([*args, b"-m", tiny.target.encode(), b"-c", b"256", b"-n", b"2"], stdin, tmp_path)
    assert code == 1 and out == b""
    line = _one_line_error(err)
    assert line.startswith("Error: " + where) and "--encoding" in line


def test_cli_decodes_with_the_encoding_given(tiny, tmp_path):
    """--encoding latin-1 reads the same bytes as the text they are: the completion equals the
    one for that text given as UTF-8."""
    base = [b"-m", tiny.target.encode(), b"-c", b"256", b"-n", b"6", b"--temp", b"0", b"--json"]
    code, latin, err = _cli([b"generate", b"caf\xe9 the cat", b"--encoding", b"latin-1", *base], b"", tmp_path)
    assert code == 0, err
    code, utf8, err = _cli([b"generate", "café the cat".encode(), *base], b"", tmp_path)
    assert code == 0, err
    assert json.loads(latin)["tokens"] == json.loads(utf8)["tokens"]
    code, _, err = _cli([b"generate", b"x", b"--encoding", b"klingon", *base], b"", tmp_path)
    assert code == 2 and "unknown encoding 'klingon'" in err


def test_chat_skips_a_message_that_is_not_utf8(tiny, tmp_path):
    """In `specllama chat` such a message is not sent; the chat goes on with the next one."""
    code, out, err = _cli([b"chat", b"-m", tiny.target.encode(), b"-c", b"256", b"-n", b"4", b"--temp", b"0"],
                          b"caf\xe9\nthe cat\n/stats\n/exit\n", tmp_path)
    assert code == 0, err
    assert "the message is not valid UTF-8: byte 0xE9 at offset 3" in err and "the message was not sent" in err
    assert "1 replies" in err  # the next message was answered


@pytest.mark.parametrize("text", ["x\udcff", "caf\udce9", "a\ud800b"])
def test_python_api_names_the_bad_character(tiny, text):
    """A str holding a lone surrogate (what Python makes of bytes that are not UTF-8) is a
    ValueError saying where, for prompts, stop strings, chat messages and the low-level handles."""
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=256) as dec:
        where = f"character {text.index(next(c for c in text if 0xD800 <= ord(c) <= 0xDFFF))}"
        for call, what in [(lambda: dec.generate(text, max_tokens=2), "the prompt"),
                           (lambda: list(dec.stream(text, max_tokens=2)), "the prompt"),
                           (lambda: dec.generate("hi", max_tokens=2, stop=["ok", text]), "stop[1]"),
                           (lambda: dec.chat_tokens([{"role": "user", "content": text}]), "messages[0].content"),
                           (lambda: dec.tokenize(text), "the text"),
                           (lambda: dec.target_model.tokenize(text), "the text"),
                           (lambda: specllama.GenerateOptions(stop=[text]), "the text")]:
            with pytest.raises(ValueError) as err:
                call()
            msg = str(err.value)
            assert msg.startswith(f"{what} is not valid UTF-8: {where}") and "\n" not in msg, msg
        assert dec.generate("the cat", max_tokens=2, temperature=0).tokens  # still usable


def test_bytes_prompt_is_a_clear_type_error(tiny):
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=256) as dec:
        with pytest.raises(TypeError, match="not bytes"):
            dec.generate(b"hello", max_tokens=2)


# -- NUL bytes ---------------------------------------------------------------------------------

def test_nul_bytes_travel_by_length(tiny, tmp_path):
    """A NUL byte reaches the tokenizer as the text it is: in prompts, stop strings, chat messages
    and templates (the model's own, a built-in one, a Jinja file)."""
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=256) as dec:
        tokens = dec.tokenize("the\x00cat", add_special=False)
        assert dec.detokenize(tokens) == " the\x00cat"  # with SPM's leading space
        msgs = [{"role": "user", "content": "a\x00b"}]
        assert "a\x00b" in dec.apply_chat_template(msgs)
        assert "a\x00b" in dec.apply_chat_template(msgs, template="chatml")
        assert "a\x00b\uf8ff" in dec.apply_chat_template([{"role": "user", "content": "a\x00b\uf8ff"}], template="chatml")
        jinja = tmp_path / "nul.jinja"
        jinja.write_text("{% for m in messages %}[\x00{{ m.content }}]{% endfor %}")
        assert dec.apply_chat_template(msgs, template=str(jinja)) == "[\x00a\x00b]"
        opts = specllama.GenerateOptions(stop=["x\x00y"])
        assert opts.stop == ["x\x00y"]
        # a stop string holding a NUL is that whole string, not the empty text before the NUL
        plain = dec.generate("the cat", max_tokens=8, temperature=0, ignore_eos=True)
        assert dec.generate("the cat", max_tokens=8, temperature=0, ignore_eos=True, stop=["\x00" + plain.text[:2]]).text \
            == plain.text


# -- threads -----------------------------------------------------------------------------------

def test_more_threads_than_cores_warns(tiny):
    physical, logical = _core.cpu_cores()
    assert 1 <= physical <= logical
    with pytest.warns(RuntimeWarning, match=f"n_threads={logical + 1} is more than the {logical} cores"):
        specllama.SpeculativeDecoder(tiny.target, n_ctx=128, n_threads=logical + 1).close()
    with pytest.warns(RuntimeWarning, match="n_threads_draft=1000"):
        specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=128, n_threads_draft=1000).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        specllama.SpeculativeDecoder(tiny.target, n_ctx=128, n_threads=logical).close()
        specllama.SpeculativeDecoder(tiny.target, n_ctx=128).close()


def test_cli_thread_warning_is_one_line(tiny, tmp_path):
    _, logical = _core.cpu_cores()
    code, _, err = _cli([b"generate", b"the cat", b"-m", tiny.target.encode(), b"-c", b"128", b"-n", b"1",
                         b"-t", str(logical + 1).encode()], b"", tmp_path)
    assert code == 0, err
    assert f"specllama: warning: n_threads={logical + 1} is more than the {logical} cores" in err
    assert "RuntimeWarning" not in err


# -- prompts far beyond the context -----------------------------------------------------------

def test_prompt_far_beyond_the_context_is_refused_from_a_prefix(tiny):
    """A 3 MB prompt is refused after tokenizing a bounded prefix of it: the count it reports is a
    lower bound far below the whole prompt's."""
    text = "the cat is on the hot word. " * 110_000
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=256) as dec:
        with pytest.raises(ValueError, match=r"the prompt has at least [\d,]+ tokens but the context holds 256"):
            dec.generate(text, max_tokens=2)
        with pytest.raises(_core.TextTooLong) as err:
            dec.target_model.tokenize(text, max_tokens=255)
        n_whole = len(dec.target_model.tokenize(text))
        assert 255 < err.value.n_tokens_at_least < n_whole / 100 and not err.value.exact
        with pytest.raises(ValueError, match=r"the conversation has at least [\d,]+ tokens but the context holds 256"):
            dec.chat_tokens([{"role": "user", "content": text}])
        with pytest.raises(ValueError, match=r"the prompt has \d+ tokens but the context holds 256"):
            dec.generate("the cat " * 40, max_tokens=2)  # just too long: counted exactly
        assert dec.generate("the cat", max_tokens=2, temperature=0).tokens


def test_cli_prompt_far_beyond_the_context(tiny, tmp_path):
    code, out, err = _cli([b"generate", b"-m", tiny.target.encode(), b"-c", b"256", b"-n", b"2"],
                          b"the cat is on the hot word. " * 110_000, tmp_path)
    assert code == 1 and out == b""
    assert _one_line_error(err).startswith("Error: the prompt has at least")


# -- property tests -----------------------------------------------------------------------------

def _as_python_text(raw: bytes) -> str:
    """What Python makes of bytes read from a file or argument: surrogates where not UTF-8."""
    return raw.decode("utf-8", "surrogateescape")


def _is_text(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


@pytest.fixture(scope="module")
def tiny_decoder(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        yield dec


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROPERTY
@given(raw=st.binary(max_size=48))
def test_any_bytes_through_tokenize_and_generate(tiny_decoder, raw):
    """Random bytes, UTF-8 or not, NULs included: tokenize and generate either work or raise a
    ValueError naming the bad character; nothing else."""
    dec = tiny_decoder
    text = _as_python_text(raw)
    if not _is_text(text):
        with pytest.raises(ValueError, match="is not valid UTF-8: character"):
            dec.tokenize(text)
        with pytest.raises(ValueError, match="the prompt is not valid UTF-8"):
            dec.generate(text, max_tokens=2)
        with pytest.raises(ValueError, match=r"stop\[0\] is not valid UTF-8"):
            dec.generate("the cat", max_tokens=2, stop=[text])
        with pytest.raises(ValueError, match=r"messages\[0\].content is not valid UTF-8"):
            dec.chat_tokens([{"role": "user", "content": text}])
        return
    tokens = dec.tokenize(text)
    assert isinstance(dec.detokenize(tokens), str)
    out = dec.generate("the cat" + text, max_tokens=3, temperature=0, stop=[text] if text else [])
    assert out.finish_reason in ("stop", "length")
    assert isinstance(dec.generate(dec.chat_tokens([{"role": "user", "content": text}]), max_tokens=2,
                                   temperature=0).text, str)


@pytest.mark.default_pair
@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=64))
def test_text_round_trips_through_the_default_tokenizer(default_pair, text):
    """Valid UTF-8 without NUL comes back from tokenize and detokenize unchanged where the
    tokenizer allows it: made of characters that each round-trip (the default target's vocabulary
    lacks a few bytes, such as 0x16, which its tokenizer drops)."""
    model = _default_model(default_pair[0])

    def round_trip(s):
        return model.detokenize(model.tokenize(s, False, False))

    text = "".join(c for c in text if round_trip(c) == c)
    assert round_trip(text) == text


_MODELS = {}


def _default_model(path):
    if path not in _MODELS:
        _MODELS[path] = _core.Model(path)
    return _MODELS[path]
