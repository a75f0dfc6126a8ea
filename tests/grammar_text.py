"""Whether llama.cpp's own grammar engine admits a text: the text fed one character at a time, each
as the one-character token of a byte-level vocabulary (the default pair's; a character it has no
token for as its bytes' tokens), each checked allowed before it is accepted (llama.cpp throws on a
token its grammar rejects)."""

from __future__ import annotations

import ctypes
from typing import Dict, Sequence, Tuple

import llama_cpp


class GrammarText:
    def __init__(self, model_path: str) -> None:
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model = llama_cpp.llama_model_load_from_file(model_path.encode(), params)
        assert self.model, model_path
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.eos = llama_cpp.llama_vocab_eos(self.vocab)
        self._tokens: Dict[str, int] = {}

    def close(self) -> None:
        llama_cpp.llama_model_free(self.model)

    def token(self, ch: str) -> int:
        if ch not in self._tokens:
            raw = ch.encode()
            out = (llama_cpp.llama_token * 8)()
            n = llama_cpp.llama_tokenize(self.vocab, raw, len(raw), out, 8, False, False)
            assert n == 1, f"{ch!r} is {n} tokens in this vocabulary"
            self._tokens[ch] = out[0]
        return self._tokens[ch]

    def tokens(self, ch: str):
        """The tokens of one character: its own, or its bytes' where the vocabulary has none (the
        grammar reads a character's bytes one token at a time)."""
        raw = ch.encode()
        out = (llama_cpp.llama_token * 8)()
        n = llama_cpp.llama_tokenize(self.vocab, raw, len(raw), out, 8, False, False)
        assert 1 <= n <= len(raw), f"{ch!r} is {n} tokens in this vocabulary"
        return list(out[:n])

    def _allowed(self, smpl, token: int) -> bool:
        d = (llama_cpp.llama_token_data * 1)()
        d[0].id, d[0].logit, d[0].p = token, 0.0, 0.0
        arr = llama_cpp.llama_token_data_array(data=d, size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
        return d[0].logit != float("-inf")

    def sampler(self, gbnf: str, triggers: Sequence[str] = ()):
        """llama.cpp's grammar sampler of gbnf from rule root (lazy, waiting for one of the trigger
        patterns, where there are any)."""
        if triggers:
            patterns = (ctypes.c_char_p * len(triggers))(*[t.encode() for t in triggers])
            smpl = llama_cpp.llama_sampler_init_grammar_lazy_patterns(self.vocab, gbnf.encode(), b"root", patterns,
                                                                      len(triggers), None, 0)
        else:
            smpl = llama_cpp.llama_sampler_init_grammar(self.vocab, gbnf.encode(), b"root")
        assert smpl, "the grammar does not parse"
        return smpl

    def admits(self, gbnf: str, text: str, complete: bool = True) -> bool:
        """Whether text is a sentence of the grammar (complete) or the start of one."""
        smpl = self.sampler(gbnf)
        try:
            for ch in text:
                for t in (self.token(ch),) if ch.isascii() else self.tokens(ch):
                    if not self._allowed(smpl, t):
                        return False
                    llama_cpp.llama_sampler_accept(smpl, t)
            return self._allowed(smpl, self.eos) if complete else True
        finally:
            llama_cpp.llama_sampler_free(smpl)

    def lazy_admits(self, gbnf: str, patterns: Sequence[str], text: str) -> Tuple[bool, bool]:
        """Whether llama.cpp's lazy grammar of gbnf with the trigger patterns lets text through, one
        character at a time (and the end after it); and whether it triggered."""
        smpl = self.sampler(gbnf, patterns)
        try:
            for ch in text:
                t = self.token(ch)
                if not self._allowed(smpl, t):
                    return False, True
                llama_cpp.llama_sampler_accept(smpl, t)
            nul = self.token("\0")  # (refused whenever the grammar is active)
            return self._allowed(smpl, self.eos), not self._allowed(smpl, nul)
        finally:
            llama_cpp.llama_sampler_free(smpl)
