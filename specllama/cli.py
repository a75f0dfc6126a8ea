"""The specllama command line: chat, generate, bench, draft, models.

Model text goes to stdout; progress, statistics and errors go to stderr. Library errors become
one line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import click

from ._core import quantize_types
from .chat import ChatSession, ContextFull, lookup_note, paused_note
from .decoder import SpeculativeDecoder, resolve_drafter

_QUANT_TYPES = quantize_types()
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


def model_options(fn):
    """Options every model-running command shares (llama.cpp's names where it has one)."""
    opts = [
        click.option("-m", "--model", type=click.Path(dir_okay=False), envvar="SPECLLAMA_MODEL",
                     help="Target GGUF (default: the default pair's F32 target)."),
        click.option("-d", "--draft", type=click.Path(dir_okay=False), envvar="SPECLLAMA_DRAFT",
                     help="Draft GGUF with the target's vocabulary (default pair's Q4_1 draft when -m is not given)."),
        click.option("--no-draft", is_flag=True, help="Plain decoding on the target alone."),
        click.option("--n-draft", type=click.IntRange(1, 64), default=10, show_default=True,
                     help="Tokens drafted per verification step: the most (adaptive) or exactly (--fixed-draft)."),
        click.option("--drafter", type=click.Choice(["auto", "model", "lookup", "model+lookup"]), default="auto",
                     show_default=True,
                     help="Who drafts: the draft model, prompt lookup (copies from earlier text; no draft model), "
                          "or the model with lookup filling in where it stops short. auto: model+lookup with a "
                          "draft model (the model alone with --mode dsi)."),
        click.option("--fixed-draft", is_flag=True,
                     help="Always draft --n-draft tokens (default: adaptive, except with --seed at --temp > 0)."),
        click.option("-c", "--ctx-size", type=click.IntRange(0), default=4096, show_default=True,
                     help="Context size in tokens (0 = the model's)."),
        click.option("-t", "--threads", type=click.IntRange(0), default=0, help="CPU threads (0 = all)."),
        click.option("--threads-draft", type=click.IntRange(0), default=0, help="CPU threads for the draft (0 = --threads)."),
        click.option("-ngl", "--n-gpu-layers", "n_gpu_layers", type=int, default=0, show_default=True,
                     help="Target layers to offload to the GPU (-1 = all; needs a GPU build of llama-cpp-python)."),
        click.option("-ngld", "--n-gpu-layers-draft", "n_gpu_layers_draft", type=int, default=0, show_default=True,
                     help="Draft layers to offload to the GPU."),
        click.option("--share-prefill/--no-share-prefill", default=True, show_default=True,
                     help="When the draft is the target in another number format (same architecture and shapes), "
                          "copy the prompt's keys and values from the target instead of processing the prompt "
                          "twice (CPU only). The output is the same either way."),
    ]
    names = ["model", "draft", "no_draft", "n_draft", "drafter", "fixed_draft", "ctx_size", "threads", "threads_draft",
             "n_gpu_layers", "n_gpu_layers_draft", "share_prefill"]

    @functools.wraps(fn)
    def gather(*args, **kwargs):
        kwargs["mo"] = {n: kwargs.pop(n) for n in names}
        return fn(*args, **kwargs)

    for opt in reversed(opts):
        gather = opt(gather)
    return gather


def sampling_options(fn):
    opts = [
        click.option("-n", "--n-predict", type=click.IntRange(1), default=256, show_default=True,
                     help="Tokens to generate at most."),
        click.option("--temp", type=click.FloatRange(0), default=0.8, show_default=True,
                     help="Temperature (0 = greedy)."),
        click.option("--top-k", type=click.IntRange(0), default=40, show_default=True, help="Top-k (0 = off)."),
        click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=0.95, show_default=True,
                     help="Top-p (1 = off)."),
        click.option("--min-p", type=click.FloatRange(0, 1, max_open=True), default=0.05, show_default=True,
                     help="Min-p (0 = off)."),
        click.option("-s", "--seed", type=click.IntRange(0, 2**64 - 1), default=None, help="Random seed (default: random)."),
    ]

    @functools.wraps(fn)
    def gather(*args, **kwargs):
        kwargs["so"] = dict(max_tokens=kwargs.pop("n_predict"), temperature=kwargs.pop("temp"),
                            top_k=kwargs.pop("top_k"), top_p=kwargs.pop("top_p"), min_p=kwargs.pop("min_p"),
                            seed=kwargs.pop("seed"))
        return fn(*args, **kwargs)

    for opt in reversed(opts):
        gather = opt(gather)
    return gather


def dsi_options(fn):
    """--mode si|dsi and DSI's settings, gathered into `do` (generate keyword arguments)."""
    opts = [
        click.option("--mode", type=click.Choice(["si", "dsi"]), default="si", show_default=True,
                     help="si: speculative decoding; dsi: Distributed Speculative Inference (drafting never "
                          "waits for verification; several target servers)."),
        click.option("--sp", type=click.IntRange(1, 64), default=1, show_default=True,
                     help="DSI: target servers (contexts on the shared target model)."),
        click.option("--lookahead", type=click.IntRange(1, 64), default=4, show_default=True,
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


def _check_dsi_drafter(mo: dict) -> None:
    if mo["no_draft"] or resolve_drafter(mo["drafter"], True, "dsi") != "model":
        raise click.UsageError("--mode dsi drafts with the draft model: drop --no-draft/--drafter")


def _generate_kwargs(mo: dict, so: dict, do: dict, **extra) -> dict:
    """generate()/stream() keyword arguments from the shared option groups."""
    if do:
        _check_dsi_drafter(mo)
        return dict(so, **do, threads_draft=mo["threads_draft"], **extra)
    return dict(so, adaptive=False if mo["fixed_draft"] else None, drafter=mo["drafter"],
                speculative=not mo["no_draft"], **extra)


def _open_decoder(mo: dict, need_draft: bool = False):
    from .models import default_pair

    model, draft, no_draft, n_draft = mo["model"], mo["draft"], mo["no_draft"], mo["n_draft"]
    if draft and not model:
        raise click.UsageError("-d/--draft needs -m/--model (the target it drafts for)")
    if no_draft and need_draft:
        raise click.UsageError("this command compares against a draft; drop --no-draft")
    if not model:
        model, default_draft = default_pair()
        draft = draft or default_draft
    if no_draft or mo["drafter"] == "lookup":
        draft = None
    if need_draft and not draft:
        raise click.UsageError("this command needs a draft model: give -d/--draft")
    dec = SpeculativeDecoder(model, draft, n_ctx=mo["ctx_size"], n_threads=mo["threads"],
                             n_threads_draft=mo["threads_draft"], n_gpu_layers=mo["n_gpu_layers"],
                             n_gpu_layers_draft=mo["n_gpu_layers_draft"], n_draft=n_draft,
                             share_prefill=mo["share_prefill"])
    how = "fixed" if mo["fixed_draft"] else "at most"
    if mo["drafter"] == "lookup" and not no_draft:
        what = f"{Path(model).name} + prompt lookup, n_draft {how} {n_draft}"
    else:
        what = f"{Path(model).name}" + (f" + draft {Path(draft).name}{' + lookup' if resolve_drafter(mo['drafter'], True) == 'model+lookup' else ''}"
                                        f", n_draft {how} {n_draft}" if draft else " (no draft)")
    return dec, what


def _echo_stream(chunks):
    """Print streamed text to stdout as it lands; return the final chunk (finish_reason, stats)."""
    final = None
    for chunk in chunks:
        if chunk.text:
            click.echo(chunk.text, nl=False)
            sys.stdout.flush()
        if chunk.finish_reason is not None:
            final = chunk
    return final


def _dsi_line(d) -> str:
    return (f"DSI: {d.n_tasks} verification tasks ({d.n_tasks_cancelled} cancelled) on {d.sp} server(s) x "
            f"{d.n_threads_server} thread(s), drafter {d.n_threads_draft} thread(s); {d.n_drafted} drafted, "
            f"{d.n_accepted}/{d.n_checked} judged drafts kept, {d.n_target_only} tokens from the target alone; "
            f"{d.verify_hidden_share:.0%} of verification time hidden behind drafting")


def _stats_line(stats) -> str:
    line = (f"{stats.n_generated} tokens in {stats.t_total_ms / 1000:.2f} s, {stats.tokens_per_second:.1f} tokens/s "
            f"after {stats.n_prompt}-token prompt ({stats.t_prefill_ms:.0f} ms"
            + (", the draft's keys and values copied from the target" if stats.n_prompt_shared else "") + ")")
    if stats.n_drafted:
        line += (f"; acceptance {stats.acceptance_rate:.1%} ({stats.n_accepted}/{stats.n_drafted})"
                 + lookup_note(stats)
                 + f", {stats.mean_accepted_length:.2f} tokens per target pass")
    return line + paused_note(stats)


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
@sampling_options
@click.option("--chat", "use_chat", is_flag=True, help="Wrap PROMPT in the model's chat template as a user message.")
@click.option("--system", default=None, help="System message (with --chat).")
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
@click.option("--compare", is_flag=True,
              help="Afterwards, generate the same tokens with plain decoding and report the speedup.")
@dsi_options
@_library_errors
def generate(prompt, mo, so, do, use_chat, system, stop, as_json, compare):
    """Generate one completion of PROMPT (or of standard input), streamed to stdout."""
    if prompt is None:
        if sys.stdin is None or (sys.stdin.isatty() if hasattr(sys.stdin, "isatty") else False):
            raise click.UsageError("give a PROMPT or pipe one on standard input")
        prompt = sys.stdin.read()
    if not prompt.strip():
        raise click.UsageError("the prompt is empty")
    dec, what = _open_decoder(mo)
    with dec:
        if use_chat:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
            prompt = dec.apply_chat_template(messages)
        kwargs = _generate_kwargs(mo, so, do, stop=list(stop))
        if as_json:
            out = dec.generate(prompt, **kwargs)
            obj = {"text": out.text, "tokens": out.tokens, "finish_reason": out.finish_reason,
                   "context_full": out.context_full, "stats": out.stats.as_dict()}
            if out.dsi is not None:
                obj["dsi"] = out.dsi.__dict__
            click.echo(json.dumps(obj))
            return
        if do:
            what += f"; DSI with {do['sp']} target server(s), lookahead {do['lookahead']}"
        _err(f"specllama: {what}")
        try:
            final = _echo_stream(dec.stream(prompt, **kwargs))
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
        if compare and kwargs.get("speculative", True) and (dec.has_draft or mo["drafter"] == "lookup"):
            _compare_plain(dec, prompt, kwargs, final)


def _compare_plain(dec, prompt, kwargs, final) -> None:
    """Plain decoding of as many tokens, same settings and seed, on the same engine."""
    spec_tokens = final.stats.n_generated
    if spec_tokens == 0:
        return
    dec.reset()
    spec_again = dec.generate(prompt, **{**kwargs, "max_tokens": spec_tokens})
    dec.reset()
    plain_kwargs = {k: v for k, v in kwargs.items() if k not in ("mode", "sp", "lookahead", "threads_server",
                                                                 "threads_draft")}
    plain = dec.generate(prompt, **{**plain_kwargs, "max_tokens": spec_tokens, "speculative": False})
    s, p = spec_again.stats, plain.stats
    same = "identical" if plain.tokens == spec_again.tokens else "different (see README: numerics at near-ties)"
    if kwargs.get("temperature", 0) > 0:
        same = "sampled with the same seed; equal in distribution, not token for token"
    _err(f"specllama: plain decoding {p.tokens_per_second:.1f} tokens/s, speculative {s.tokens_per_second:.1f} "
         f"tokens/s: {s.tokens_per_second / p.tokens_per_second:.2f}x on {spec_tokens} tokens; output {same}")


@main.command()
@model_options
@sampling_options
@click.option("--system", default=None, help="System message.")
@dsi_options
@_library_errors
def chat(mo, so, do, system):
    """Chat with the model, using its own chat template; replies stream as they are verified.

    The conversation stays in the KV cache across turns. Commands: /stats, /reset, /exit
    (or end of input). Ctrl-C stops the current reply (at the prompt, it discards what was typed).
    A line ending in a backslash continues on the next; text between lines of triple quotes
    (\"\"\") is one message, for pasting.
    """
    dec, what = _open_decoder(mo)
    with dec:
        session = ChatSession(dec, system=system)
        kwargs = _generate_kwargs(mo, so, do)
        if do:
            what += f"; DSI with {do['sp']} target server(s), lookahead {do['lookahead']}"
        _err(f"specllama chat: {what}, context {dec.n_ctx} tokens.")
        _err("Type /exit or press Ctrl-D to quit, /reset to start over, /stats for speed; Ctrl-C stops a reply; "
             '""" starts and ends a message of several lines.')
        reader = _ChatInput()
        while True:
            reading = True
            try:
                message = reader.read()
                reading = False
                if message is None:  # end of input
                    _err("")
                    break
                if not _chat_turn(session, message.strip(), kwargs, dec.n_ctx, reader):
                    break
            except KeyboardInterrupt:  # at the prompt, or between a reply and the next prompt
                _err("\n(input discarded; /exit or Ctrl-D quits)" if reading else "")


def _chat_turn(session, text: str, kwargs: dict, n_ctx: int, reader: "_ChatInput") -> bool:
    """One message of the chat: a command or a reply. False: the user asked to quit."""
    if not text:
        return True
    if text in ("/exit", "/quit"):
        return False
    if text == "/reset":
        _start_over(session)
    elif text == "/stats":
        _err(session.stats.summary())
    elif text.startswith("/") and "\n" not in text:
        _err(f"unknown command {text}; commands: /stats, /reset, /exit")
    else:
        try:
            final = _echo_stream(session.send(text, **kwargs))
            click.echo("")
        except KeyboardInterrupt:
            click.echo("")
            _err("(reply stopped)")
            return True
        except ContextFull as exc:
            _err(f"The context is full: {exc}. Starting over (/reset) frees it.")
            _offer_start_over(session, reader)
            return True
        if final is not None and final.context_full:
            _err(f"(the reply filled the context of {n_ctx} tokens)")
            _offer_start_over(session, reader)
    return True


class _ChatInput:
    """Reads the chat's messages. A line is a message; a line ending in a backslash continues on
    the next; a message that starts with triple quotes runs to a line that ends with them (for
    pasted text). With a terminal on stdin and stdout, lines are read through readline (editing,
    history within the session, and a paste of several lines is one message where the terminal
    brackets pastes) and the prompt goes with the input; otherwise the prompt goes to stderr, so
    stdout holds only replies."""

    def __init__(self) -> None:
        self.interactive = sys.stdin.isatty() and sys.stdout.isatty()
        if self.interactive:
            try:
                import readline  # input() edits lines through it once imported
            except ImportError:  # Python built without it: plain input()
                return
            if "GNU readline" in (readline.__doc__ or ""):
                # a paste of several lines arrives as one message (Python turns this off for its REPL)
                readline.parse_and_bind("set enable-bracketed-paste on")

    def line(self, prompt: str):
        """One line (without its end), or None at end of input."""
        if self.interactive:
            try:
                return input(prompt)
            except EOFError:
                return None
        click.echo(prompt, nl=False, err=True)
        line = sys.stdin.readline()
        return line.rstrip("\r\n") if line else None

    def read(self):
        """The next message, or None at end of input."""
        line = self.line(">>> ")
        if line is None:
            return None
        if line.lstrip().startswith('"""'):
            lines, line = [], line.lstrip()[3:]
            while not line.rstrip().endswith('"""'):
                lines.append(line)
                line = self.line("... ")
                if line is None:  # end of input ends the block
                    return "\n".join(lines)
            lines.append(line.rstrip()[:-3])
            return "\n".join(lines)
        lines = []
        while line.endswith("\\"):
            lines.append(line[:-1])
            line = self.line("... ")
            if line is None:
                line = ""
                break
        lines.append(line)
        return "\n".join(lines)


def _start_over(session) -> None:
    session.reset()
    _err("(conversation cleared)")


def _offer_start_over(session, reader: "_ChatInput") -> None:
    try:
        answer = reader.line("Start over? [y/N] ")  # through readline on a terminal, like messages
    except KeyboardInterrupt:
        answer = None
        _err("")
    if answer is not None and answer.strip().lower() in ("y", "yes"):
        _start_over(session)


def _parse_range(text: str):
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            values = list(range(lo, hi + 1))
        else:
            values = [int(x) for x in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected a range like 1-12 or a list like 2,4,8, got {text!r}") from None
    if not values or min(values) < 1 or max(values) > 64:
        raise click.BadParameter(f"n_draft values must lie in 1..64, got {text!r}")
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
    from .bench import PROMPTS, run_bench, write_report

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
    if mode == "dsi":
        _check_dsi_drafter(mo)
    dec, what = _open_decoder(mo, need_draft=mo["drafter"] != "lookup")
    with dec:
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
                               drafter=mo["drafter"])
    paths = write_report(report, Path(out_dir))
    if as_json:
        click.echo(json.dumps(report))
    else:
        click.echo(_bench_table(report))
    _err(f"specllama: wrote {paths['json']} and {paths['png']}")


def _bench_table(r: dict) -> str:
    lines = [f"plain decoding: {r['plain_tokens_per_second']:.1f} tokens/s "
             f"({r['target_ms_per_token']:.1f} ms per target decode)",
             "",
             "n_draft         tokens/s  speedup  acceptance  tokens/pass  predicted  predicted(meas.)  loop overhead  same output"]
    for e in r["sweep"]:
        if e["mode"] == "dsi":
            continue
        lines.append(f"{e['label']:>14}  {e['speculative_tokens_per_second']:>8.1f}  {e['speedup']:>6.2f}x  "
                     f"{e['acceptance_rate']:>10.1%}  {e['mean_accepted_length']:>11.2f}  "
                     f"{e['predicted_speedup']:>8.2f}x  {e['predicted_speedup_measured_verify']:>15.2f}x  "
                     f"{e['loop_overhead_share']:>12.2%}  {e['outputs_identical']:>5}/{len(e['per_prompt'])}")
    dsi = [e for e in r["sweep"] if e["mode"] == "dsi"]
    if dsi:
        lines += ["", "DSI (sp, lookahead)      tokens/s  speedup  acceptance  threads (drafter, per server)  "
                      "verification hidden  tasks cancelled  same output"]
        for e in dsi:
            lines.append(f"{e['label']:>24}  {e['speculative_tokens_per_second']:>8.1f}  {e['speedup']:>6.2f}x  "
                         f"{e['acceptance_rate']:>10.1%}  {e['threads']['draft']:>14}, {e['threads']['per_server']:<14}  "
                         f"{e['verify_hidden_share']:>19.0%}  {e['tasks_cancelled_share']:>15.0%}  "
                         f"{e['outputs_identical']:>5}/{len(e['per_prompt'])}")
    best = next(e for e in r["sweep"] if e["mode"] == r["mode"] and e["n_draft"] == r["n_draft"])
    lines += ["", f"per prompt, {best['label']}:"]
    for name, p in best["per_prompt"].items():
        lines.append(f"  {name:<8} plain {p['plain_tokens_per_second']:6.1f}  speculative "
                     f"{p['speculative_tokens_per_second']:6.1f} tokens/s  {p['speedup']:.2f}x  "
                     f"acceptance {p['acceptance_rate']:.1%}")
    lines += ["", f"{best['label']}: {r['speedup']:.2f}x plain decoding"]
    if r["best_n_draft"] is not None:
        lines.append(f"best fixed n_draft: {r['best_n_draft']}, {r['best_fixed_speedup']:.2f}x")
    if r.get("adaptive_vs_best_fixed_by_prompt"):
        lines.append("adaptive vs each prompt's best fixed n_draft: " + ", ".join(
            f"{name} {v['ratio']:.2f} (n_draft {v['best_fixed_n_draft']})"
            for name, v in r["adaptive_vs_best_fixed_by_prompt"].items()))
    if r.get("dsi_best"):
        lines.append(f"best DSI: {r['dsi_best']}, {r['dsi_speedup']:.2f}x")
    return "\n".join(lines)


@main.command("draft")
@click.argument("target", type=click.Path(exists=True, dir_okay=False))
@click.option("--type", "qtype", default="q4_0", show_default=True,
              type=click.Choice(_QUANT_TYPES, case_sensitive=False), help="Quantization type of the draft.")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Output GGUF (default: TARGET with the type in its name); with --sweep, a directory.")
@click.option("--sweep", is_flag=True, help="Try several types; report size, cost, acceptance, predicted speedup.")
@click.option("--types", "sweep_types", default="q8_0,q5_1,q4_1,q4_0,q2_k", show_default=True,
              help="Types tried by --sweep.")
@click.option("-t", "--threads", type=click.IntRange(0), default=0, help="CPU threads (0 = all).")
@click.option("-n", "--n-predict", type=click.IntRange(1), default=64, show_default=True,
              help="Tokens per prompt when measuring (--sweep).")
@click.option("--json", "as_json", is_flag=True, help="Print the sweep report as JSON.")
@_library_errors
def draft_cmd(target, qtype, output, sweep, sweep_types, threads, n_predict, as_json):
    """Make a quantized draft of TARGET with llama.cpp's quantizer (or find the best with --sweep)."""
    from .draft_sweep import make_draft, sweep_drafts

    qtype = qtype.lower()
    if not sweep:
        out = output or _default_draft_name(target, qtype)
        _err(f"specllama: quantizing {target} to {qtype} -> {out}")
        make_draft(target, out, qtype, n_threads=threads)
        _err(f"specllama: wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB)")
        return
    out_dir = Path(output) if output else Path(target).parent
    types = [t.strip().lower() for t in sweep_types.split(",") if t.strip()]
    unknown = [t for t in types if t not in _QUANT_TYPES]
    if unknown or not types:
        raise click.BadParameter(f"unknown quantization type(s) {', '.join(unknown)}; choose from "
                                 f"{', '.join(_QUANT_TYPES)}", param_hint="--types")
    with click.progressbar(length=len(types) + 1, label="measuring drafts", file=sys.stderr) as bar:
        report = sweep_drafts(target, types, out_dir, n_predict=n_predict, n_threads=threads, progress=bar.update)
    if as_json:
        click.echo(json.dumps(report))
        return
    click.echo(f"target {Path(target).name}: {report['target_size_mb']:.1f} MB, "
               f"{report['target_ms_per_token']:.1f} ms per token")
    v = report["verify_ms_by_batch"]
    click.echo(f"verification batch cost: {', '.join(f'{k} tokens {ms:.1f} ms' for k, ms in v.items() if k in (1, 2, 5, 9, 13))}")
    click.echo("type     size MB  cost ratio  acceptance  best n_draft  predicted speedup  (Leviathan, verify = 1 decode)")
    for e in report["drafts"]:
        click.echo(f"{e['type']:<7} {e['size_mb']:>8.1f}  {e['cost_ratio']:>10.2f}  {e['acceptance_rate']:>10.1%}  "
                   f"{e['best_n_draft']:>12}  {e['predicted_speedup']:>16.2f}x  {e['predicted_speedup_leviathan']:>10.2f}x")
    best = report["recommended"]
    click.echo(f"recommended: {best['type']} ({best['path']}), predicted {best['predicted_speedup']:.2f}x")


def _default_draft_name(target: str, qtype: str) -> str:
    p = Path(target)
    return str(p.with_name(f"{p.stem}.{qtype}.gguf"))


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
    import numpy as np

    from . import simulate as sim

    def mean(fn):
        rng = np.random.default_rng(0)
        return float(np.mean([fn(rng) for _ in range(repeats)]))

    ks = [lookahead] if lookahead else list(range(1, 33))
    si_t = {k: mean(lambda r, k=k: sim.si(target_ms, draft_ms, k, n_predict, accept, r)) for k in ks}
    dsi_t = {k: mean(lambda r, k=k: sim.dsi(target_ms, draft_ms, k, n_predict, accept, sp, r)) for k in ks}
    k_si, k_dsi = min(si_t, key=si_t.get), min(dsi_t, key=dsi_t.get)
    plain = sim.non_si(target_ms, n_predict)
    click.echo(f"simulated (offline model), {n_predict} tokens, target {target_ms} ms, drafter {draft_ms} ms, "
               f"acceptance {accept}:")
    click.echo(f"  non-SI  {plain:9.1f} ms")
    click.echo(f"  SI      {si_t[k_si]:9.1f} ms  lookahead {k_si:>2}  {plain / si_t[k_si]:.2f}x non-SI")
    click.echo(f"  DSI     {dsi_t[k_dsi]:9.1f} ms  lookahead {k_dsi:>2}, {sp} target servers  "
               f"{plain / dsi_t[k_dsi]:.2f}x non-SI, {si_t[k_si] / dsi_t[k_dsi]:.2f}x SI")
    if online:
        right = sim.pattern(n_predict, accept, np.random.default_rng(0))
        rows = [("non-SI", "non-si", 1, sim.non_si(target_ms, n_predict)),
                ("SI", "si", k_si, sim.si(target_ms, draft_ms, k_si, n_predict, accept, None, right)),
                ("DSI", "dsi", k_dsi, sim.dsi(target_ms, draft_ms, k_dsi, n_predict, accept, sp, None, right))]
        click.echo(f"online (native orchestrator, simulated servers), one acceptance pattern "
                   f"({float(np.mean(right[:n_predict])):.2f} right):")
        wall = {}
        for label, mode, k, offline in rows:
            r = sim.online(mode, target_ms, draft_ms, right, n_predict, lookahead=k, sp=sp)
            if not r["correct"]:
                raise click.ClickException(f"online {label} emitted a wrong token (a bug: please report it)")
            wall[label] = r["t_total_ms"]
            extra = (f"  {r['n_tasks_cancelled']}/{r['n_tasks']} tasks cancelled, "
                     f"{r['verify_hidden_share']:.0%} of verification hidden" if mode == "dsi" else "")
            click.echo(f"  {label:<7} {r['t_total_ms']:9.1f} ms  (offline model on the same pattern "
                       f"{offline:.1f} ms){extra}")
        click.echo(f"  DSI {wall['non-SI'] / wall['DSI']:.2f}x non-SI, {wall['SI'] / wall['DSI']:.2f}x SI (measured)")
    if heatmap:
        fractions = [round(x, 2) for x in np.linspace(0.02, 1.0, 25)]
        accepts = [round(x, 2) for x in np.linspace(0.0, 1.0, 21)]
        with click.progressbar(length=1, label="grid", file=sys.stderr) as bar:
            pts = sim.grid(fractions, accepts, n=100, sp=sp, repeats=5)
            bar.update(1)
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "grid.json").write_text(json.dumps([p.__dict__ for p in pts], indent=1))
        sim.plot_heatmaps(pts, out / "heatmaps.png", title=f"offline simulation, SP = {sp}, 100 tokens")
        _err(f"specllama: wrote {out / 'grid.json'} and {out / 'heatmaps.png'}")


@main.command()
@click.option("--verify", is_flag=True, help="Re-hash both files (rebuilding one that fails).")
@_library_errors
def models(verify):
    """Show the default model pair and where it is cached; build it if missing."""
    from .models import cache_dir, default_pair

    target, draft = default_pair(verify=verify)
    click.echo(f"cache:  {cache_dir()}")
    click.echo(f"target: {target} ({os.path.getsize(target) / 1e6:.1f} MB, F32)")
    click.echo(f"draft:  {draft} ({os.path.getsize(draft) / 1e6:.1f} MB, Q4_1)")


if __name__ == "__main__":
    main()
