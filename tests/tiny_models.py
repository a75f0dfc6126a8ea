"""Tiny llama-architecture GGUF models with random weights, written with the gguf package.

Small enough that a whole test generation takes milliseconds; real enough that llama.cpp loads
them through the same path as any GGUF. A draft is made from a target by adding noise to its
weights, so the pair agrees often but not always, as real pairs do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import gguf
import numpy as np

WORDS = ["the", "a", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are", "with",
         "as", "he", "she", "they", "be", "at", "one", "have", "this", "from", "by", "hot", "word",
         "but", "what", "some", "we", "can", "out", "other", "were", "all", "there", "when", "up"]

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")


def vocab(extra_words: int = 0, rename: Optional[Dict[int, str]] = None) -> List[str]:
    """An SPM-style vocabulary: specials, 256 byte tokens, letters and words."""
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    tokens += ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens += ["\u2581" + w for w in WORDS]
    tokens += [f"\u2581w{i}" for i in range(extra_words)]
    for i, text in (rename or {}).items():
        tokens[i] = text
    return tokens


def random_weights(n_vocab: int, seed: int, n_embd: int = 64, n_layer: int = 2, n_ff: int = 128,
                   logit_scale: float = 0.5) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def w(*shape, std=0.08):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    t = {"token_embd.weight": w(n_vocab, n_embd, std=1.0),
         "output_norm.weight": np.ones(n_embd, np.float32),
         "output.weight": w(n_vocab, n_embd, std=logit_scale)}
    for i in range(n_layer):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = np.ones(n_embd, np.float32)
        t[p + "ffn_norm.weight"] = np.ones(n_embd, np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t[p + name + ".weight"] = w(n_embd, n_embd)
        t[p + "ffn_gate.weight"] = w(n_ff, n_embd)
        t[p + "ffn_up.weight"] = w(n_ff, n_embd)
        t[p + "ffn_down.weight"] = w(n_embd, n_ff)
    return t


def steered(weights: Dict[str, np.ndarray], follows: Dict[int, Dict[int, float]], after_text: Dict[int, float],
            seed: int, text: float = 4.0) -> Dict[str, np.ndarray]:
    """The same model made to follow a table: after token u (a key of follows), token v's logit is
    about follows[u][v] (0 for the tokens not named); after any other token, v's is raised by about
    after_text[v]. Each named token gets its own direction of the embedding space, which the other
    tokens' embeddings and the output's rows otherwise leave out, and the layers' output projections
    are made small, so that the last token decides the next one's logits (a model that writes a
    format's markup, say, where a random one would not)."""
    rng = np.random.default_rng(seed)
    out = {k: v.copy() for k, v in weights.items()}
    emb, head = out["token_embd.weight"], out["output.weight"]
    n_embd = emb.shape[1]
    named = sorted(follows)
    basis, _ = np.linalg.qr(rng.standard_normal((n_embd, len(named) + 1)))
    dirs, text_dir = basis[:, :-1].T, basis[:, -1]
    emb -= (emb @ basis) @ basis.T
    head -= (head @ basis) @ basis.T
    scale = np.sqrt(n_embd)  # (an embedding of this norm has an RMS of 1)
    others = np.setdiff1d(np.arange(len(emb)), named)
    emb[others] += text * text_dir
    for i, u in enumerate(named):
        emb[u] = scale * dirs[i]
        for v, logit in follows[u].items():
            head[v] += logit / scale * dirs[i]
    rms = np.sqrt(np.mean(emb[others] ** 2, axis=1)).mean()
    for v, logit in after_text.items():
        head[v] += logit * rms / text * text_dir
    for name in out:
        if name.endswith(("attn_output.weight", "ffn_down.weight")):
            out[name] *= 0.05
    return {k: v.astype(np.float32) for k, v in out.items()}


def deepened(weights: Dict[str, np.ndarray], n_extra: int, seed: int, std: float) -> Dict[str, np.ndarray]:
    """The same model with n_extra more layers whose output projections are small (std): it
    costs more per token and mostly agrees with the original, which can then be its cheap draft."""
    rng = np.random.default_rng(seed)
    out = dict(weights)
    n_layer = sum(1 for k in weights if k.endswith("attn_q.weight"))
    for i in range(n_layer, n_layer + n_extra):
        for name, a in weights.items():
            if name.startswith("blk.0."):
                scale = std if name.endswith(("attn_output.weight", "ffn_down.weight")) else 0.08
                new = a.copy() if a.ndim == 1 else (rng.standard_normal(a.shape) * scale).astype(np.float32)
                out[name.replace("blk.0.", f"blk.{i}.", 1)] = new
    return out


def perturbed(weights: Dict[str, np.ndarray], seed: int, noise: float) -> Dict[str, np.ndarray]:
    """The same weights plus relative Gaussian noise: a stand-in for a worse draft."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, a in weights.items():
        if name.endswith("norm.weight"):
            out[name] = a.copy()
        else:
            out[name] = (a + rng.standard_normal(a.shape).astype(np.float32) * noise * a.std()).astype(np.float32)
    return out


def _add_tokenizer(writer: "gguf.GGUFWriter", tokens: List[str], add_bos: bool, eos: int,
                   user_defined: Sequence[str] = (), control: Sequence[str] = ()) -> None:
    """The tiny models' SPM tokenizer: specials, byte tokens, pieces scored to prefer longer ones;
    tokens spelled as one of user_defined are always rendered (as Gemma 4's converter marks its
    call and channel tags), not control tokens; those spelled as one of control are control tokens
    (as Mistral's [TOOL_CALLS] is), as are the ones spelled <...>."""
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    scores = [0.0] * len(tokens)
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for i, text in enumerate(tokens):
        if text.startswith("<0x") and len(text) == 6:
            types[i] = gguf.TokenType.BYTE
        elif i == 0:
            types[i] = gguf.TokenType.UNKNOWN
        elif text in user_defined:
            types[i] = gguf.TokenType.USER_DEFINED
        elif (text.startswith("<") and text.endswith(">") and len(text) > 2) or text in control:
            types[i] = gguf.TokenType.CONTROL
        else:
            scores[i] = -float(len(tokens) - i) / len(tokens) + len(text)  # prefer longer pieces
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(eos)
    writer.add_unk_token_id(0)
    writer.add_eot_token_id(4)
    writer.add_add_bos_token(add_bos)


def _write_tensors(writer: "gguf.GGUFWriter", weights: Dict[str, np.ndarray], path: Path) -> Path:
    for name, a in weights.items():
        writer.add_tensor(name, a)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_model(path: Path, tokens: List[str], weights: Dict[str, np.ndarray], n_head: int = 4,
                n_ctx_train: int = 2048, extra_u32: Optional[Dict[str, int]] = None,
                extra_str: Optional[Dict[str, str]] = None,
                chat_template: Union[None, str, List[Dict[str, str]]] = CHATML, add_bos: bool = True, eos: int = 2,
                user_defined: Sequence[str] = (), control: Sequence[str] = (), space_prefix: bool = True,
                split_max_tensors: int = 0) -> Path:
    """A llama-architecture GGUF; extra_u32 adds 32-bit metadata keys (for broken-file tests),
    extra_str string ones (general.basename, general.finetune, ...);
    chat_template None leaves the template out (a list of {"name", "template"}: a default and named
    ones, as a tokenizer_config lists them); add_bos and eos set the tokenizer's BOS rule and
    end-of-sequence token; user_defined: token texts rendered always, control: control tokens
    (_add_tokenizer); space_prefix False: text is tokenized without a space put before it (as a
    BPE vocabulary's is), so that a word after a special token is the word's token.
    split_max_tensors > 0 splits the model across files of at most that many tensors each, named as
    llama.cpp's gguf-split names them (path's stem-00001-of-0000N.gguf); the first one's path is returned."""
    n_vocab, n_embd = weights["token_embd.weight"].shape
    n_layer = sum(1 for k in weights if k.endswith("attn_q.weight"))
    n_ff = weights["blk.0.ffn_up.weight"].shape[0]
    assert len(tokens) == n_vocab
    writer = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    writer.add_name("specllama-tiny")
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    _add_tokenizer(writer, tokens, add_bos, eos, user_defined, control)
    writer.add_add_eos_token(False)
    if not space_prefix:
        writer.add_add_space_prefix(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    for key, value in (extra_u32 or {}).items():
        writer.add_uint32(key, value)
    for key, value in (extra_str or {}).items():
        writer.add_string(key, value)

    _write_tensors(writer, weights, path)
    parts = -(-len(weights) // split_max_tensors) if split_max_tensors else 1
    return path if parts <= 1 else path.with_name(f"{path.stem}-00001-of-{parts:05d}.gguf")


def parts_only_at_near_ties(model_path, prompt, a, b, tol=0.01):
    """Two greedy continuations of prompt (token ids) are equal, or equal up to a position where
    the target's logits after the common part put the two tokens within tol of the largest logit."""
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if i is None:
        return len(a) == len(b)
    import specllama

    ctx = specllama.Context(specllama.Model(model_path), n_ctx=512)
    logits = ctx.decode(list(prompt) + list(a[:i]), all_logits=True)[-1]
    return abs(float(logits[a[i]]) - float(logits[b[i]])) <= tol * max(1.0, float(abs(logits).max()))


def reindexed(weights: Dict[str, np.ndarray], tokens: List[str], new_tokens: List[str],
              seed: int) -> Dict[str, np.ndarray]:
    """The same model for another vocabulary: a token both lists hold keeps its embedding and
    output rows; a token only new_tokens holds gets random ones."""
    rng = np.random.default_rng(seed)
    index = {t: i for i, t in enumerate(tokens)}
    out = dict(weights)
    for name in ("token_embd.weight", "output.weight"):
        a = weights[name]
        rows = [a[index[t]] if t in index else (rng.standard_normal(a.shape[1]) * a.std()).astype(np.float32)
                for t in new_tokens]
        out[name] = np.stack(rows).astype(np.float32)
    return out


def other_vocab(tokens: List[str]) -> List[str]:
    """Another tokenizer over the same text: the specials first as before, then the words in
    reverse order with every fourth one dropped (spelled from letters instead), words the first
    does not have, and the letters and byte tokens last: most ids differ, a few tokens are its own."""
    specials, rest = tokens[:5], tokens[5:]
    words = [t for t in rest if t.startswith("\u2581") and len(t) > 1]
    others = [t for t in rest if t not in words]
    kept = [w for i, w in enumerate(reversed(words)) if i % 4 != 1]
    return specials + kept + ["\u2581cat", "\u2581dog", "\u2581sun"] + others


def mamba_weights(n_vocab: int, seed: int, n_embd: int = 64, n_layer: int = 2, d_inner: int = 128,
                  d_state: int = 16, d_conv: int = 4, dt_rank: int = 4) -> Dict[str, np.ndarray]:
    """Random weights of a Mamba (selective state space) model: a purely recurrent memory."""
    rng = np.random.default_rng(seed)

    def w(*shape, std=0.08):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    t = {"token_embd.weight": w(n_vocab, n_embd, std=1.0), "output_norm.weight": np.ones(n_embd, np.float32),
         "output.weight": w(n_vocab, n_embd, std=0.5)}
    for i in range(n_layer):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = np.ones(n_embd, np.float32)
        t[p + "ssm_in.weight"] = w(2 * d_inner, n_embd)
        t[p + "ssm_conv1d.weight"] = w(d_inner, d_conv, std=0.3)
        t[p + "ssm_conv1d.bias"] = w(d_inner, std=0.1)
        t[p + "ssm_x.weight"] = w(dt_rank + 2 * d_state, d_inner)
        t[p + "ssm_dt.weight"] = w(d_inner, dt_rank, std=0.3)
        t[p + "ssm_dt.bias"] = w(d_inner, std=0.1)
        t[p + "ssm_a"] = -np.exp(w(d_inner, d_state, std=0.5))
        t[p + "ssm_d"] = np.ones(d_inner, np.float32)
        t[p + "ssm_out.weight"] = w(n_embd, d_inner)
    return t


def write_mamba(path: Path, tokens: List[str], weights: Dict[str, np.ndarray], d_state: int = 16, d_conv: int = 4,
                dt_rank: int = 4) -> Path:
    """A Mamba GGUF with the tiny models' SPM tokenizer (the keys llama.cpp's converter writes)."""
    n_vocab, n_embd = weights["token_embd.weight"].shape
    n_layer = sum(1 for k in weights if k.endswith("ssm_in.weight"))
    d_inner = weights["blk.0.ssm_in.weight"].shape[0] // 2
    assert len(tokens) == n_vocab
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_name("specllama-tiny-mamba")
    writer.add_context_length(2048)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_block_count(n_layer)
    writer.add_ssm_conv_kernel(d_conv)
    writer.add_ssm_inner_size(d_inner)
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_time_step_rank(dt_rank)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_ssm_dt_b_c_rms(False)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(writer, tokens, add_bos=True, eos=2)
    writer.add_chat_template(CHATML)
    return _write_tensors(writer, weights, path)


def jamba_weights(n_vocab: int, seed: int, n_embd: int = 64, n_ff: int = 128, d_state: int = 16, d_conv: int = 4,
                  dt_rank: int = 4, layers: str = "ma") -> Dict[str, np.ndarray]:
    """Random weights of a Jamba model, a hybrid: per layer of `layers`, "m" a Mamba block (a
    recurrent state) or "a" an attention block (a KV cache), each followed by a feed-forward block."""
    rng = np.random.default_rng(seed)
    d_inner = 2 * n_embd  # the only expansion llama.cpp's Jamba supports

    def w(*shape, std=0.08):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    t = {"token_embd.weight": w(n_vocab, n_embd, std=1.0), "output_norm.weight": np.ones(n_embd, np.float32),
         "output.weight": w(n_vocab, n_embd, std=0.5)}
    for i, kind in enumerate(layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = np.ones(n_embd, np.float32)
        if kind == "m":
            t[p + "ssm_in.weight"] = w(2 * d_inner, n_embd)
            t[p + "ssm_conv1d.weight"] = w(d_inner, d_conv, std=0.3)
            t[p + "ssm_conv1d.bias"] = w(d_inner, std=0.1)
            t[p + "ssm_x.weight"] = w(dt_rank + 2 * d_state, d_inner)
            t[p + "ssm_dt_norm.weight"] = np.ones(dt_rank, np.float32)
            t[p + "ssm_dt.weight"] = w(d_inner, dt_rank, std=0.3)
            t[p + "ssm_dt.bias"] = w(d_inner, std=0.1)
            t[p + "ssm_b_norm.weight"] = np.ones(d_state, np.float32)
            t[p + "ssm_c_norm.weight"] = np.ones(d_state, np.float32)
            t[p + "ssm_a"] = -np.exp(w(d_inner, d_state, std=0.5))
            t[p + "ssm_d"] = np.ones(d_inner, np.float32)
            t[p + "ssm_out.weight"] = w(n_embd, d_inner)
        else:
            for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                t[p + name + ".weight"] = w(n_embd, n_embd)
        t[p + "ffn_norm.weight"] = np.ones(n_embd, np.float32)
        t[p + "ffn_gate.weight"] = w(n_ff, n_embd)
        t[p + "ffn_up.weight"] = w(n_ff, n_embd)
        t[p + "ffn_down.weight"] = w(n_embd, n_ff)
    return t


def write_jamba(path: Path, tokens: List[str], weights: Dict[str, np.ndarray], n_head: int = 4, d_state: int = 16,
                d_conv: int = 4, dt_rank: int = 4) -> Path:
    """A Jamba GGUF (layers with ssm_in are Mamba blocks, the others attention) with the tiny
    models' SPM tokenizer."""
    n_vocab, n_embd = weights["token_embd.weight"].shape
    n_layer = sum(1 for k in weights if k.endswith("ffn_norm.weight"))
    recurrent = [f"blk.{i}.ssm_in.weight" in weights for i in range(n_layer)]
    assert len(tokens) == n_vocab
    writer = gguf.GGUFWriter(str(path), "jamba")
    writer.add_name("specllama-tiny-jamba")
    writer.add_context_length(2048)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(weights["blk.0.ffn_up.weight"].shape[0])
    writer.add_block_count(n_layer)
    writer.add_head_count(n_head)
    writer.add_head_count_kv([0 if r else n_head for r in recurrent])  # 0: a recurrent layer
    writer.add_ssm_conv_kernel(d_conv)
    writer.add_ssm_inner_size(2 * n_embd)
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_time_step_rank(dt_rank)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(writer, tokens, add_bos=True, eos=2)
    writer.add_chat_template(CHATML)
    return _write_tensors(writer, weights, path)


def gemma3_weights(n_vocab: int, seed: int, n_embd: int = 64, n_layer: int = 2, n_ff: int = 128,
                   head_dim: int = 16) -> Dict[str, np.ndarray]:
    """Random weights of a Gemma 3 model (sliding-window and global attention layers)."""
    rng = np.random.default_rng(seed)

    def w(*shape, std=0.08):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    t = {"token_embd.weight": w(n_vocab, n_embd, std=0.15), "output_norm.weight": np.ones(n_embd, np.float32),
         "output.weight": w(n_vocab, n_embd, std=0.5)}
    for i in range(n_layer):
        p = f"blk.{i}."
        for name in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            t[p + name + ".weight"] = np.ones(n_embd, np.float32)
        t[p + "attn_q_norm.weight"] = np.ones(head_dim, np.float32)
        t[p + "attn_k_norm.weight"] = np.ones(head_dim, np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t[p + name + ".weight"] = w(n_embd, n_embd)
        t[p + "ffn_gate.weight"] = w(n_ff, n_embd)
        t[p + "ffn_up.weight"] = w(n_ff, n_embd)
        t[p + "ffn_down.weight"] = w(n_embd, n_ff)
    return t


def write_gemma3(path: Path, tokens: List[str], weights: Dict[str, np.ndarray], n_head: int = 4, window: int = 8,
                 pattern: int = 2) -> Path:
    """A Gemma 3 GGUF whose layers attend to the last `window` positions, except every
    `pattern`-th, which attends to all, with the tiny models' SPM tokenizer."""
    n_vocab, n_embd = weights["token_embd.weight"].shape
    n_layer = sum(1 for k in weights if k.endswith("attn_q.weight"))
    assert len(tokens) == n_vocab
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_name("specllama-tiny-gemma3")
    writer.add_context_length(2048)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(weights["blk.0.ffn_up.weight"].shape[0])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_key_length(n_embd // n_head)
    writer.add_value_length(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(window)
    writer.add_uint32("gemma3.attention.sliding_window_pattern", pattern)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(writer, tokens, add_bos=True, eos=2)
    writer.add_chat_template(CHATML)
    return _write_tensors(writer, weights, path)
