"""
specllama's native core: speculative decoding over llama.cpp (use the specllama package)
"""
from __future__ import annotations
import collections.abc
import numpy
import numpy.typing
import os
import typing
__all__: list[str] = ['ADAPTIVE_STATE_FORMAT', 'BatchDrafting', 'CACHE_TYPES', 'Completion', 'Context', 'DECODER_DEFAULTS', 'DSIStats', 'Decoder', 'DraftLengthModel', 'GenerateOptions', 'MAX_DRAFT', 'MAX_SERVERS', 'Model', 'Stats', 'StepPrices', 'StepTrace', 'TextTooLong', 'ThreadTuner', 'TokenLogprob', 'accept_trials', 'candidates_distribution', 'chat_apply_template', 'chat_builtin_templates', 'check_text', 'cpu_cores', 'default_devices', 'list_devices', 'log_reclaim', 'log_set_level', 'model_footprint', 'model_identity', 'quantize', 'quantize_types', 'rpc_add_servers', 'rpc_endpoint', 'rpc_failure_message', 'rpc_failures', 'rpc_park_breaks', 'rpc_serve', 'sampling_distribution', 'simulate_dsi', 'supports_gpu_offload', 'supports_rpc', 'vocab_difference']
class TextTooLong(ValueError):
    pass
class Model:
    """
    A GGUF model loaded by llama.cpp.
    """
    def __init__(self, path: str | os.PathLike, n_gpu_layers: typing.SupportsInt | typing.SupportsIndex = 0, device: typing.Any = None, split_mode: str = 'layer', tensor_split: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex] | None = None, main_gpu: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
        """
        Load a GGUF. device: where its offloaded layers go ('CUDA0', 'CUDA0,CUDA1', an rpc-server's 'HOST:PORT', 'none'; None: every GPU), split_mode / tensor_split / main_gpu: how it spans several (as llama.cpp's -sm, -ts, -mg).
        """
    def detokenize(self, tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], special: bool = False, whole: bool = False) -> str:
        """
        The tokens' text: their pieces one after another, or (whole) as llama.cpp's llama_detokenize renders a whole text (a SentencePiece tokenizer's space in front of the first word dropped)
        """
    def is_eog(self, token: typing.SupportsInt | typing.SupportsIndex) -> bool:
        """
        Whether llama.cpp counts this token as an end of generation.
        """
    def named_chat_template(self, name: str) -> str:
        """
        The GGUF's chat template of that name (tokenizer.chat_template.NAME: 'tool_use', 'rag', ...); '' where it has none.
        """
    def token_text(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> str:
        ...
    def token_to_piece(self, token: typing.SupportsInt | typing.SupportsIndex, special: bool = False) -> bytes:
        ...
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False, max_tokens: typing.SupportsInt | typing.SupportsIndex | None = None) -> list[int]:
        """
        Token ids of text (NUL bytes included). With max_tokens, a text of more tokens raises ValueError after tokenizing a bounded prefix of it, however long it is.
        """
    @property
    def add_bos(self) -> bool:
        """
        Whether tokenize(add_special=True) puts the BOS token first.
        """
    @property
    def bos(self) -> int:
        ...
    @property
    def chat_template(self) -> str:
        ...
    @property
    def description(self) -> str:
        ...
    @property
    def eog_ids(self) -> list[int]:
        """
        The end-of-generation tokens the decoding loop stops at, read from the vocabulary when the model loads.
        """
    @property
    def eos(self) -> int:
        ...
    @property
    def fim_tokens(self) -> dict:
        """
        the fill-in-the-middle tokens the model's vocabulary names (pre, suf, mid, pad, rep, sep; -1 where it has none)
        """
    @property
    def max_piece_bytes(self) -> int:
        """
        The longest token's text, in bytes.
        """
    @property
    def n_ctx_train(self) -> int:
        ...
    @property
    def n_vocab(self) -> int:
        ...
    @property
    def path(self) -> str:
        ...
    @property
    def size(self) -> int:
        ...
    @property
    def weight_buffers(self) -> dict:
        """
        Where llama.cpp put the weights: each buffer type's name ('CPU_Mapped', 'CPU_REPACK' for quantized weights repacked for the CPU's kernels, 'CUDA0', ...) and its size in MiB.
        """
class Context:
    """
    A context on a Model: its KV cache, batch decoding with logits, and rollback.
    """
    def __init__(self, model: Model, n_ctx: typing.SupportsInt | typing.SupportsIndex = 2048, n_batch: typing.SupportsInt | typing.SupportsIndex = 512, n_threads: typing.SupportsInt | typing.SupportsIndex = 0, swa_full: bool = True, checkpoint_memory: str = 'auto', cache_type_k: str = 'f16', cache_type_v: str = 'f16', flash_attn: str = 'auto') -> None:
        ...
    def checkpoint(self) -> None:
        """
        A recurrent or hybrid model: save its state now, for rollback to any length from here on (a no-op for other memories); replaces the previous one.
        """
    def decode(self, tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], all_logits: bool = True) -> numpy.typing.NDArray[numpy.float32]:
        """
        Append tokens to the cache; return logits as float32 [n, n_vocab] (all_logits) or [1, n_vocab].
        """
    def keep_checkpoint(self) -> None:
        """
        A recurrent, hybrid or window-only memory: save its state now in a checkpoint that checkpoint() leaves in place (where a prompt ends); a no-op for a KV cache.
        """
    def keep_reusable(self, seq: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], n_min: typing.SupportsInt | typing.SupportsIndex, n_max: typing.SupportsInt | typing.SupportsIndex | None = None) -> tuple[int, int, int]:
        """
        Keep what the cache shares with seq (at most n_max tokens): the common prefix, and beyond it runs of at least n_min tokens held at other positions, moved to their positions in seq, with the tokens between them decoded (llama-server's --cache-reuse, also after inserted text). Returns (n_kept, n_shifted, n_decoded): tokens now holds seq[:n_kept]. The moved keys and values were computed after the old text, so what follows is close to, not exactly, a fresh pass over seq.
        """
    def restart_at(self, seq: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], n_from: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Empty the cache and go on from position n_from of seq: tokens becomes seq[:n_from], none of which the memory holds (later tokens attend only to what follows them); a rollback into them empties the cache
        """
    def rollback(self, n_keep: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Keep the first n_keep cached tokens and drop the rest (a recurrent or hybrid model: back to the last checkpoint at or before n_keep, then the tokens from there decoded again)
        """
    def set_n_threads(self, n_threads: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Decode on n_threads threads from now on; 0 or -1: the count the context was made with, which where it was -1 and the model runs on the CPU alone is tuned by measuring the decodes.
        """
    @property
    def can_reuse(self) -> bool:
        """
        whether keep_reusable can move keys and values here (a model with plain attention)
        """
    @property
    def checkpoint_memory(self) -> str:
        """
        where checkpoint() saves: 'device' (a copy within the memory that holds the state, llama.cpp's on-device flag) or 'host'; '' where the memory takes no checkpoints
        """
    @property
    def model(self) -> Model:
        ...
    @property
    def n_ctx(self) -> int:
        ...
    @property
    def n_forgotten(self) -> int:
        """
        leading positions the memory does not hold (restart_at); 0 normally
        """
    @property
    def n_past(self) -> int:
        ...
    @property
    def n_redecoded(self) -> int:
        """
        tokens decoded again after restoring a checkpoint, or from the start where none was saved
        """
    @property
    def n_thread_probes(self) -> int:
        """
        decodes run at another thread count than the tuned one, to compare
        """
    @property
    def n_threads(self) -> int:
        """
        the CPU threads decodes use now (the tuned count, where tuned)
        """
    @property
    def recurrent(self) -> bool:
        """
        whether the model's memory is recurrent or hybrid (every rollback by checkpoint)
        """
    @property
    def threads_tuned(self) -> bool:
        """
        whether the thread count is tuned by measuring the decodes (ThreadTuner): n_threads -1, and the model on the CPU alone
        """
    @property
    def tokens(self) -> list[int]:
        ...
    @property
    def window_only(self) -> bool:
        """
        whether a sliding-window model's window layers keep only the window (swa_full=False): rollback further back than the window goes back to a checkpoint
        """
class ThreadTuner:
    """
    How many CPU threads a context's decodes use where n_threads is -1: the decodes run at the current count, and now and then one runs at another (a quarter fewer, or the full count); one that beats the current count's running mean cost for decodes of its size by 15%, twice in a row, moves the count there (engine/thread_tuner.h).
    """
    def __init__(self, max_threads: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    def move_to(self, threads: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Move the current count to threads (clamped to 1..max_threads) without measuring it, as another model's tuner on the same cores found; probes go on from there.
        """
    def next(self, n_tokens: typing.SupportsInt | typing.SupportsIndex) -> int:
        """
        The thread count for the next decode, of n_tokens.
        """
    def record(self, n_tokens: typing.SupportsInt | typing.SupportsIndex, threads: typing.SupportsInt | typing.SupportsIndex, ms: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        A decode of n_tokens tokens on threads threads took ms.
        """
    @property
    def max_threads(self) -> int:
        ...
    @property
    def n_moves(self) -> int:
        """
        changes of the current count
        """
    @property
    def n_probes(self) -> int:
        """
        decodes run at another count to compare
        """
    @property
    def threads(self) -> int:
        """
        the current count
        """
class BatchDrafting:
    """
    How many tokens slots that share their decodes draft while several generate: rounds priced from merged decodes' costs by token count and the acceptance rate.
    """
    draft_margin: typing.ClassVar[float] = 1.1
    def __init__(self) -> None:
        ...
    def acceptance(self, lookup: bool = False) -> float:
        """
        the acceptance rate of the model's judged drafts (lookup: of prompt lookup's); negative while none was judged
        """
    def cap(self, n_generating: typing.SupportsInt | typing.SupportsIndex, n_max: typing.SupportsInt | typing.SupportsIndex, slot: typing.SupportsInt | typing.SupportsIndex = -1) -> int:
        """
        the most tokens a slot drafts with the model while n_generating slots generate; until the rounds are priced, one slot (slot: its sequence; -1: any) drafts one token and the others none
        """
    def catch_up_pays(self, n_generating: typing.SupportsInt | typing.SupportsIndex, k: typing.SupportsInt | typing.SupportsIndex, n_unread: typing.SupportsInt | typing.SupportsIndex, n_remaining: typing.SupportsInt | typing.SupportsIndex) -> bool:
        """
        whether a slot whose draft has n_unread tokens to read before drafting k a step wins that back in its n_remaining tokens (true while the rounds are not priced)
        """
    def leave(self, slot: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        a slot's generation ended: another slot drafts to price the rounds
        """
    def lookup_cap(self, n_generating: typing.SupportsInt | typing.SupportsIndex, n_max: typing.SupportsInt | typing.SupportsIndex) -> int:
        """
        the most prompt-lookup drafts a slot adds to a step without model drafts while n_generating slots generate
        """
    def lookup_rate(self, n_generating: typing.SupportsInt | typing.SupportsIndex, k: typing.SupportsInt | typing.SupportsIndex) -> float:
        """
        expected tokens per ms of a round of plain steps where one slot adds k lookup drafts; negative while unknown
        """
    def observe_decode(self, draft: bool, n_tokens: typing.SupportsInt | typing.SupportsIndex, ms: typing.SupportsFloat | typing.SupportsIndex, n_slots: typing.SupportsInt | typing.SupportsIndex = 1, n_generating: typing.SupportsInt | typing.SupportsIndex = 1) -> None:
        """
        a merged decode of n_tokens from n_slots slots on the draft (or the target) took ms while n_generating slots generated
        """
    def observe_step(self, n_judged: typing.SupportsInt | typing.SupportsIndex, n_accepted: typing.SupportsInt | typing.SupportsIndex, n_lookup_judged: typing.SupportsInt | typing.SupportsIndex = 0, n_lookup_accepted: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
        """
        a slot's finished step: the model's drafts the target judged (a draft is judged where every draft before it was kept) and those it kept, and prompt lookup's
        """
    def observe_verified(self, n_model: typing.SupportsInt | typing.SupportsIndex, n_before_lookup: typing.SupportsInt | typing.SupportsIndex, n_drafted: typing.SupportsInt | typing.SupportsIndex, n_accepted: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        the same from a verified step: n_drafted drafts, the model's first n_model, prompt lookup's from n_before_lookup, n_accepted of them kept
        """
    def rate(self, n_generating: typing.SupportsInt | typing.SupportsIndex, k: typing.SupportsInt | typing.SupportsIndex) -> float:
        """
        expected tokens per ms of a round with k drafts per slot (0: plain); negative while unknown
        """
class DraftLengthModel:
    """
    The adaptive draft length's cost and acceptance estimates and its keep-drafting rule (what the decoding loop consults per drafted token).
    """
    def __init__(self) -> None:
        ...
    def accept_prob(self, conf: typing.SupportsFloat | typing.SupportsIndex) -> float:
        ...
    def draft_pays(self) -> bool:
        ...
    def draft_prompt_after(self, n_prompt: typing.SupportsInt | typing.SupportsIndex, n_gen: typing.SupportsInt | typing.SupportsIndex) -> int:
        """
        the tokens a generation of at most n_gen makes before its draft reads n_prompt new prompt tokens: 0, before the first step it drafts in; more than n_gen, never
        """
    def draft_prompt_pays(self, n_prompt: typing.SupportsInt | typing.SupportsIndex, n_gen: typing.SupportsInt | typing.SupportsIndex) -> bool:
        """
        whether the draft reads n_prompt new prompt tokens before the first step it drafts in, in a generation of at most n_gen tokens (draft_prompt_after is 0)
        """
    def draft_this_step(self) -> bool:
        ...
    def keep_drafting(self, n_done: typing.SupportsInt | typing.SupportsIndex, conf: typing.SupportsFloat | typing.SupportsIndex, p_reach: typing.SupportsFloat | typing.SupportsIndex, n_max: typing.SupportsInt | typing.SupportsIndex = 0) -> tuple[bool, float]:
        """
        after the n_done-th drafted token (confidence conf), in a step of at most n_max drafts (0: look one token ahead only): (draft another?, the updated p_reach)
        """
    def keep_going(self, n: typing.SupportsInt | typing.SupportsIndex, p_reach: typing.SupportsFloat | typing.SupportsIndex, n_max: typing.SupportsInt | typing.SupportsIndex = 0) -> bool:
        ...
    def keep_going_p(self, n: typing.SupportsInt | typing.SupportsIndex, p_reach: typing.SupportsFloat | typing.SupportsIndex, p_next: typing.SupportsFloat | typing.SupportsIndex, draft_cost: bool, n_max: typing.SupportsInt | typing.SupportsIndex = 0) -> bool:
        ...
    def model_drafts(self, adaptive: bool) -> bool:
        """
        at the start of a step that may draft: whether the draft model drafts in it
        """
    def observe(self, n_model: typing.SupportsInt | typing.SupportsIndex, n: typing.SupportsInt | typing.SupportsIndex, n_accepted: typing.SupportsInt | typing.SupportsIndex, conf: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], probe: typing.SupportsInt | typing.SupportsIndex, catch_up_ms: typing.SupportsFloat | typing.SupportsIndex, draft_ms: typing.SupportsFloat | typing.SupportsIndex, verify_ms: typing.SupportsFloat | typing.SupportsIndex, prev_n: typing.SupportsInt | typing.SupportsIndex, n_decodes: typing.SupportsInt | typing.SupportsIndex = -1, n_catch_up: typing.SupportsInt | typing.SupportsIndex = 0, n_verified: typing.SupportsInt | typing.SupportsIndex = 0, n_prompt: typing.SupportsInt | typing.SupportsIndex = 0, resumed: bool = False) -> None:
        """
        a finished step, as the decoding loop reports it (n_decodes: the draft's decodes after its catch-up, -1: n_model - 1; n_catch_up: the catch-up's decodes where each took one token; n_verified: the tokens the verification decoded, 0: n + 1; n_prompt: prompt tokens its decode took in first, whose pass verify_ms then is; resumed: the catch-up read what the draft sat out, and prices no catch-up)
        """
    def observe_acceptance(self, conf: typing.SupportsFloat | typing.SupportsIndex, accepted: bool) -> None:
        ...
    def observe_catch_up(self, ms: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    def observe_checkpoint(self, ms: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        such a target saved its state in ms: a step's checkpoint and restore, until a batch prices them
        """
    def observe_draft_decode(self, ms: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    def observe_draft_prompt(self, n_tokens: typing.SupportsInt | typing.SupportsIndex, ms: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        the draft's prompt pass: it prices a probe's catch-up until a probe is measured
        """
    def observe_generation(self, n_tokens: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        a finished generation of n_tokens that the draft model could draft in
        """
    def observe_leave(self, excess_ms: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    def observe_prompt(self, n_tokens: typing.SupportsInt | typing.SupportsIndex, ms: typing.SupportsFloat | typing.SupportsIndex) -> None:
        """
        the target's prompt pass: it prices a batch's further tokens until a batch is verified
        """
    def observe_read(self, n: typing.SupportsInt | typing.SupportsIndex, foretold: typing.SupportsFloat | typing.SupportsIndex, ms: typing.SupportsFloat | typing.SupportsIndex, n_left: typing.SupportsInt | typing.SupportsIndex) -> bool:
        """
        what the read found (n positions; foretold, the sum of the chances that the target would have kept the draft's token at each: greedy, where its top token came next), what it cost, and the tokens the generation may still make: whether the probe drafts (false: called off, the step is plain)
        """
    def observe_sat_out(self, n_tokens: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        a generation of n_tokens that the draft sat out (a step the model drafts in starts the count again)
        """
    def observe_step(self, tokens: typing.SupportsInt | typing.SupportsIndex, ms: typing.SupportsFloat | typing.SupportsIndex, model_drafted: bool = True, steady: bool = True, steady_ms: typing.SupportsFloat | typing.SupportsIndex = -1.0) -> None:
        ...
    def observe_verify(self, n_tokens: typing.SupportsInt | typing.SupportsIndex, ms: typing.SupportsFloat | typing.SupportsIndex) -> bool:
        ...
    def padded_length(self, n_max: typing.SupportsInt | typing.SupportsIndex) -> int:
        """
        the most drafts worth padding a verification for (at most n_max): the fixed length that makes the most tokens per ms with every verification priced as the padded one; the first batch's length (3, at most n_max) while unpriced
        """
    def paused(self) -> bool:
        """
        whether the model is left out of steps now, but for probes (a pause ends with a probe that pays)
        """
    def pays_at_prices(self) -> bool:
        """
        whether some length of a first batch pays at the prices and acceptance so far (what decides before any drafting step is measured)
        """
    def priced_excess_ms(self, acceptance: typing.SupportsFloat | typing.SupportsIndex | None = None) -> float:
        """
        what a first batch at its best length is predicted to cost beyond plain steps (negative: it pays), its drafts kept at the acceptance so far (or at this per-draft acceptance)
        """
    def pricing(self, adaptive: bool) -> bool:
        """
        whether a step of an adaptive loop is plain, to price plain steps first
        """
    def probe_gap(self) -> int:
        """
        the steps a paused model sits out before its next probe
        """
    def probe_window(self, n_behind: typing.SupportsInt | typing.SupportsIndex, n_left: typing.SupportsInt | typing.SupportsIndex) -> int:
        """
        the tokens this probe's catch-up reads of the n_behind its draft sat out, n_left tokens before the generation ends: the last 32 alone, or 0: all (a new text's first probe, where drafting would win that read back)
        """
    def set_decodes_again(self, yes: bool) -> None:
        """
        a target whose rollback decodes the kept tokens again (recurrent or hybrid memory)
        """
    def set_padded(self, n_tokens: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        verification batches padded to n_tokens (0: none): a batch of 2 to n_tokens costs one of n_tokens
        """
    def set_read_probes(self, yes: bool) -> None:
        """
        probes read first: the draft reads what it sat out, and the probe drafts only where the acceptance judged there saves, at the prices measured, more than the pause's last drafting probe cost
        """
    def set_sampled(self, yes: bool) -> None:
        """
        the kind of the generations from here on; greedy and sampled ones each keep their own acceptance, calibration, rates and pause (the prices are shared)
        """
    def set_settle_steps(self, n: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        the first n steps of a run of drafting (or plain) steps are transitions: their costs price nothing, and a probe drafts n + 1 steps in a row
        """
    def set_state(self, state: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]) -> None:
        """
        that state given back (ValueError where it is not one of this format; the model is then unchanged)
        """
    def state(self) -> list[float]:
        """
        what the model learned (prices, acceptance, rates, pauses, generation lengths), as numbers, the state format first; not its settings
        """
    @typing.overload
    def verify_ms(self, n_tokens: typing.SupportsInt | typing.SupportsIndex) -> float:
        """
        the estimated ms of a target decode of n_tokens tokens
        """
    @typing.overload
    def verify_ms(self, n_tokens: typing.SupportsInt | typing.SupportsIndex) -> float:
        ...
    @property
    def acceptance(self) -> float:
        ...
    @property
    def catch_up_ms(self) -> float:
        ...
    @property
    def draft_ms(self) -> float:
        ...
    @property
    def judged_by_reads(self) -> bool:
        """
        whether this kind drafts only where a read says so: it has not drafted, the other kind's draft is paused, probes read and every price is known
        """
    @property
    def knows_draft_prices(self) -> bool:
        """
        whether padded_length judges on measured prices and 16 judged drafts (until then it gives the first batch's length)
        """
    @property
    def knows_plain_step(self) -> bool:
        ...
    @property
    def leave_ms(self) -> float:
        ...
    @property
    def lookup_accept_prob(self) -> float:
        """
        how often the target keeps a prompt lookup proposal (0.5 before any)
        """
    @property
    def padded(self) -> int:
        ...
    @property
    def probing(self) -> bool:
        """
        whether the step draft_this_step last began is a probe of a paused model
        """
    @property
    def rate(self) -> float:
        ...
    @property
    def read_acceptance(self) -> float:
        """
        the acceptance the pause's reads say (0.8 before any)
        """
    @property
    def read_due(self) -> bool:
        """
        whether the step draft_this_step just began is a probe that reads first
        """
    @property
    def read_probes(self) -> bool:
        ...
    @property
    def sampled(self) -> bool:
        ...
    @property
    def settle_steps(self) -> int:
        ...
    @property
    def skipped_steps(self) -> int:
        ...
    @property
    def typical_length(self) -> int:
        """
        the median of the last 8 such generations' lengths (-1: fewer than 3)
        """
class StepPrices:
    """
    Prices (ms) the adaptive draft length uses instead of measured times: the same prices give the same draft lengths on any machine and under any load.
    """
    @staticmethod
    def as_dict(obj) -> dict:
        """
        A Stats, DSIStats, StepTrace or StepPrices as a plain dict of its fields (for JSON; Stats.steps
            as a list of dicts).
        """
    def __init__(self, draft_ms: typing.SupportsFloat | typing.SupportsIndex, verify_ms: typing.SupportsFloat | typing.SupportsIndex, verify_token_ms: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    def __repr__(self) -> str:
        ...
    @property
    def draft_ms(self) -> float:
        """
        one draft decode
        """
    @property
    def verify_ms(self) -> float:
        """
        a one-token verification
        """
    @property
    def verify_token_ms(self) -> float:
        """
        each further token of a verification
        """
class GenerateOptions:
    """
    What one generation does. Every field has its default here and is checked by the native core when a generation starts; GenerateOptions(**fields) sets fields by name.
    """
    def __init__(self, **kwargs) -> None:
        ...
    def copy(self) -> GenerateOptions:
        """
        an independent copy
        """
    def validate(self) -> None:
        """
        raise ValueError naming the first bad field
        """
    @property
    def acceptance(self) -> str | None:
        """
        'rejection' (Leviathan et al.'s rule), 'match' (llama.cpp's sample-and-match, for comparison) or 'keyed' (match with draws keyed by position, the draft's too: the output is plain decoding's with the same seed, whatever is drafted; a seed then leaves the draft length adaptive); None: keyed when sampling with a seed (mode si), else rejection
        """
    @acceptance.setter
    def acceptance(self, arg1: str | None) -> None:
        ...
    @property
    def adaptive(self) -> bool | None:
        """
        choose each step's draft length by expected speed; None: adaptive unless sampling with a seed by the rejection or match rule (adaptive lengths follow measured times)
        """
    @adaptive.setter
    def adaptive(self, arg0: bool | None) -> None:
        ...
    @property
    def cache_reuse(self) -> int:
        """
        llama-server's --cache-reuse: >= 1 moves runs of at least this many prompt tokens that the cache holds at other positions (after an edit in the middle) instead of processing them again; the output then follows the target given those moved keys and values, not a fresh pass. 0: the common prefix only
        """
    @cache_reuse.setter
    def cache_reuse(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def device_sampling(self) -> bool | None:
        """
        True: run the sampling chain inside llama_decode, on the device holding the output layer, so that only each row's candidates come back to the host, where the generation allows it (no grammar, logit bias or penalties, greedy logprobs, top_k 0, DSI, slots); False: whole rows of logits come back and the host samples; None (default): True for each model offloaded to a GPU. Stats.sampling says which ran
        """
    @device_sampling.setter
    def device_sampling(self, arg0: bool | None) -> None:
        ...
    @property
    def draft_ahead(self) -> int:
        """
        draft this many tokens past each step's drafts while the target verifies them (0: off); needs adaptive=False and the draft model, mode 'si'
        """
    @draft_ahead.setter
    def draft_ahead(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def drafter(self) -> str:
        """
        'auto' (model+lookup with a draft model, the model alone in DSI, plain decoding without one), 'model', 'lookup' (no draft model needed) or 'model+lookup'
        """
    @drafter.setter
    def drafter(self, arg1: str) -> None:
        ...
    @property
    def forced_drafts(self) -> bool:
        """
        with a grammar and a draft model: where the grammar leaves no choice of the next characters, their tokens are drafted with q = 1 ahead of the draft model, without draft decodes to choose them (exact either way)
        """
    @forced_drafts.setter
    def forced_drafts(self, arg0: bool) -> None:
        ...
    @property
    def frequency_penalty(self) -> float:
        """
        subtracted per occurrence from a counted token's logit; 0 = off
        """
    @frequency_penalty.setter
    def frequency_penalty(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def grammar(self) -> str:
        """
        a GBNF grammar (llama.cpp's) the output must follow: what it rejects is masked out of the target's and the draft's logits alike at every position; '' = none
        """
    @grammar.setter
    def grammar(self, arg1: str) -> None:
        ...
    @property
    def grammar_root(self) -> str:
        """
        the grammar's start rule
        """
    @grammar_root.setter
    def grammar_root(self, arg0: str) -> None:
        ...
    @property
    def grammar_thinking(self) -> str:
        """
        a lazy grammar's: where a reasoning model's reply may open a thinking block ('optional') or starts inside one its prompt opened ('open'), the grammar reads the reply from after the block's closing tag on (grammar_thinking_tags), so that a trigger inside the thinking does not start it; '' = the whole reply
        """
    @grammar_thinking.setter
    def grammar_thinking(self, arg1: str) -> None:
        ...
    @property
    def grammar_thinking_calls(self) -> list[str]:
        """
        tags that also end the thinking block grammar_thinking reads past, and that the grammar reads from their start on: a tool call's opening tag, where the model may call a tool from inside its thinking (Qwen3.5's <tool_call>)
        """
    @grammar_thinking_calls.setter
    def grammar_thinking_calls(self, arg1: collections.abc.Sequence[str]) -> None:
        ...
    @property
    def grammar_thinking_tags(self) -> tuple[str, str]:
        """
        the opening and closing tags of the thinking block grammar_thinking reads past
        """
    @grammar_thinking_tags.setter
    def grammar_thinking_tags(self, arg1: tuple[str, str]) -> None:
        ...
    @property
    def grammar_trigger_patterns(self) -> list[str]:
        """
        a lazy grammar (llama.cpp's, as llama-server's for tool calls): it allows everything until the output matches one of these regular expressions, and then follows from the first capture group's start (or the match's)
        """
    @grammar_trigger_patterns.setter
    def grammar_trigger_patterns(self, arg0: collections.abc.Sequence[str]) -> None:
        ...
    @property
    def grammar_trigger_tokens(self) -> list[int]:
        """
        a lazy grammar's trigger tokens: it follows from the first of these in the output
        """
    @grammar_trigger_tokens.setter
    def grammar_trigger_tokens(self, arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> None:
        ...
    @property
    def ignore_eos(self) -> bool:
        """
        keep going past end-of-generation tokens
        """
    @ignore_eos.setter
    def ignore_eos(self, arg0: bool) -> None:
        ...
    @property
    def infill(self) -> bool:
        """
        llama.cpp's infill sampler after the chain (llama-server's 'infill' in its sampler list), applied to the target's and the draft's distributions alike; needs top_k in [1, 1024]
        """
    @infill.setter
    def infill(self, arg0: bool) -> None:
        ...
    @property
    def logit_bias(self) -> dict[int, float]:
        """
        {token id: bias} added to the token's logits before the chain (-inf: never drawn), for the target and the draft alike
        """
    @logit_bias.setter
    def logit_bias(self, arg1: collections.abc.Mapping[typing.SupportsInt | typing.SupportsIndex, typing.SupportsFloat | typing.SupportsIndex]) -> None:
        ...
    @property
    def logprobs(self) -> int | None:
        """
        None, or 0..20: each generated token's log-probability under the target's final distribution (the chain's; greedy: the softmax of the logits), with this many likeliest tokens at its position (Completion.logprobs)
        """
    @logprobs.setter
    def logprobs(self, arg0: typing.SupportsInt | typing.SupportsIndex | None) -> None:
        ...
    @property
    def lookahead(self) -> int:
        """
        DSI: drafted tokens per verification task
        """
    @lookahead.setter
    def lookahead(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def max_tokens(self) -> int:
        """
        tokens to generate at most
        """
    @max_tokens.setter
    def max_tokens(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def min_p(self) -> float:
        """
        drop tokens below min_p times the most likely one's probability, in [0, 1)
        """
    @min_p.setter
    def min_p(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def mode(self) -> str:
        """
        'si' (speculative decoding) or 'dsi' (Distributed Speculative Inference)
        """
    @mode.setter
    def mode(self, arg1: str) -> None:
        ...
    @property
    def n_draft(self) -> int | None:
        """
        tokens drafted per step: at most (adaptive) or exactly; None: the decoder's n_draft
        """
    @n_draft.setter
    def n_draft(self, arg0: typing.SupportsInt | typing.SupportsIndex | None) -> None:
        ...
    @property
    def overlap(self) -> bool:
        """
        DSI: False runs SI on the same code path (each verification waited for)
        """
    @overlap.setter
    def overlap(self, arg1: bool) -> None:
        ...
    @property
    def prediction(self) -> list[int]:
        """
        a prediction of the output in the target's token ids (OpenAI's Predicted Outputs: the text an edit mostly repeats); where the output follows it, its next tokens are drafted first, at no draft decode; the output is the target's whatever it holds. Mode 'si'; [] (default): none
        """
    @prediction.setter
    def prediction(self, arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> None:
        ...
    @property
    def presence_penalty(self) -> float:
        """
        subtracted once from a counted token's logit; 0 = off
        """
    @presence_penalty.setter
    def presence_penalty(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def preserved_tokens(self) -> list[int]:
        """
        special tokens spelled out in the text where generated (a chat format's tags that are control tokens, as llama-server's preserved tokens); other control tokens are left out of it
        """
    @preserved_tokens.setter
    def preserved_tokens(self, arg0: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> None:
        ...
    @property
    def prices(self) -> StepPrices | None:
        """
        StepPrices for the adaptive rule instead of measured times; None: measured
        """
    @prices.setter
    def prices(self, arg0: StepPrices | None) -> None:
        ...
    @property
    def record_steps(self) -> bool:
        """
        keep a record of every step in Stats.steps (what was drafted, with what confidence, what it cost, what was kept): for looking into the draft length (mode 'si')
        """
    @record_steps.setter
    def record_steps(self, arg0: bool) -> None:
        ...
    @property
    def repeat_last_n(self) -> int:
        """
        tokens the penalties count (0: none; -1: all before the position)
        """
    @repeat_last_n.setter
    def repeat_last_n(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def repeat_penalty(self) -> float:
        """
        llama.cpp's repetition penalty over the last repeat_last_n tokens (prompt, output and drafts before each position): a counted token's logit divided by it where positive, multiplied where not; 1 = off
        """
    @repeat_penalty.setter
    def repeat_penalty(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def seed(self) -> int | None:
        """
        random seed; None: a random one
        """
    @seed.setter
    def seed(self, arg0: typing.SupportsInt | typing.SupportsIndex | None) -> None:
        ...
    @property
    def sp(self) -> int:
        """
        DSI: target servers
        """
    @sp.setter
    def sp(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def speculative(self) -> bool:
        """
        False: plain decoding on the target, through the same loop
        """
    @speculative.setter
    def speculative(self, arg0: bool) -> None:
        ...
    @property
    def stop(self) -> list[str]:
        """
        stop strings (not included in the text)
        """
    @stop.setter
    def stop(self, arg1: collections.abc.Sequence[str]) -> None:
        ...
    @property
    def temperature(self) -> float:
        """
        0 = greedy; > 0 samples
        """
    @temperature.setter
    def temperature(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def thinking_budget(self) -> int:
        """
        a reasoning model's thinking budget in tokens (llama-server's --reasoning-budget): once that many tokens of the reply are thinking (after thinking_budget_start, or from the reply's start with thinking_budget_opened) and none of thinking_budget_ends closed it, thinking_budget_forced follows, for the target and the draft alike; -1 = none
        """
    @thinking_budget.setter
    def thinking_budget(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def thinking_budget_ends(self) -> list[list[int]]:
        """
        token sequences that close the thinking (its closing tag)
        """
    @thinking_budget_ends.setter
    def thinking_budget_ends(self, arg1: collections.abc.Sequence[collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]]) -> None:
        ...
    @property
    def thinking_budget_forced(self) -> list[int]:
        """
        the tokens forced once the budget is spent (a message and the closing tag)
        """
    @thinking_budget_forced.setter
    def thinking_budget_forced(self, arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> None:
        ...
    @property
    def thinking_budget_opened(self) -> bool:
        """
        the prompt opened the thinking
        """
    @thinking_budget_opened.setter
    def thinking_budget_opened(self, arg1: bool) -> None:
        ...
    @property
    def thinking_budget_start(self) -> list[int]:
        """
        the tokens that open the thinking (its opening tag)
        """
    @thinking_budget_start.setter
    def thinking_budget_start(self, arg1: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> None:
        ...
    @property
    def threads_draft(self) -> int:
        """
        DSI: drafter threads (0: split the decoder's threads)
        """
    @threads_draft.setter
    def threads_draft(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def threads_server(self) -> int:
        """
        DSI: threads per target server (0: split the decoder's threads)
        """
    @threads_server.setter
    def threads_server(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def top_k(self) -> int:
        """
        keep the k most likely tokens (0 = all)
        """
    @top_k.setter
    def top_k(self, arg1: typing.SupportsInt | typing.SupportsIndex) -> None:
        ...
    @property
    def top_p(self) -> float:
        """
        nucleus: the smallest set reaching this probability, in (0, 1]
        """
    @top_p.setter
    def top_p(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def wait_for_drafts(self) -> bool:
        """
        DSI: use the target's prediction at a position only once the drafter has proposed there, so every token is a judged draft whatever the timing
        """
    @wait_for_drafts.setter
    def wait_for_drafts(self, arg1: bool) -> None:
        ...
class StepTrace:
    """
    One step of a generation (GenerateOptions.record_steps): what the adaptive rule saw.
    """
    @staticmethod
    def as_dict(obj) -> dict:
        """
        A Stats, DSIStats, StepTrace or StepPrices as a plain dict of its fields (for JSON; Stats.steps
            as a list of dicts).
        """
    @property
    def acceptance(self) -> float:
        """
        its overall acceptance estimate then
        """
    @property
    def catch_up_ms(self) -> float:
        """
        of which the draft's catch-up decode
        """
    @property
    def conf(self) -> list[float]:
        """
        the draft model's confidence in each of its tokens
        """
    @property
    def draft_ms(self) -> float:
        """
        the step's drafting (as priced: StepPrices where given)
        """
    @property
    def n_accepted(self) -> int:
        """
        of which the target kept
        """
    @property
    def n_drafted(self) -> int:
        """
        tokens drafted in all (the model's, then prompt lookup's)
        """
    @property
    def n_max(self) -> int:
        """
        tokens the step could draft at most
        """
    @property
    def n_model(self) -> int:
        """
        tokens the draft model drafted
        """
    @property
    def n_prompt(self) -> int:
        """
        prompt tokens the verification's decode took in before them (the first step's: the part of the prompt the cache lacked; verify_ms is then their pass too). 0 with StepPrices, which price the prompt apart
        """
    @property
    def n_verified(self) -> int:
        """
        tokens the verification decoded: the target's last token and the drafts, and copies of the last where the batch was padded (verify_shape)
        """
    @property
    def paused(self) -> bool:
        """
        the draft model was paused (drafting did not pay)
        """
    @property
    def probe(self) -> bool:
        """
        the step was a probe of the paused draft model
        """
    @property
    def rate(self) -> float:
        """
        the rule's long-run tokens per ms when the step began
        """
    @property
    def read(self) -> bool:
        """
        it began with a probe's read of what the draft sat out (a plain step where the read called the probe off)
        """
    @property
    def read_foretold(self) -> float:
        """
        the sum over them of the chance that the target would have kept the draft's token there (greedy: the positions where the draft's top token was the token that came next)
        """
    @property
    def read_ms(self) -> float:
        """
        what the read cost in ms (as priced, with GenerateOptions.prices); it is not in draft_ms
        """
    @property
    def read_n(self) -> int:
        """
        the positions that read judged (0: no read)
        """
    @property
    def resumed(self) -> bool:
        """
        the draft's catch-up took in more tokens than one step brings (what it sat out while paused, or a new prompt): catch_up_ms is then that read
        """
    @property
    def verify_ms(self) -> float:
        """
        the verification (as priced)
        """
class Stats:
    """
    What one generation did, and where its time went.
    """
    @staticmethod
    def as_dict(obj) -> dict:
        """
        A Stats, DSIStats, StepTrace or StepPrices as a plain dict of its fields (for JSON; Stats.steps
            as a list of dicts).
        """
    @property
    def acceptance(self) -> str:
        """
        how the target's tokens were drawn and drafts judged: 'greedy' (temperature 0), 'rejection', 'keyed' (a seeded generation's default: the tokens are plain decoding's with that seed) or 'match' (GenerateOptions.acceptance); set where nothing was drafted too
        """
    @property
    def acceptance_rate(self) -> float:
        """
        n_accepted / n_drafted
        """
    @property
    def accepted_hist(self) -> list[int]:
        """
        accepted_hist[k]: steps that kept k drafted tokens
        """
    @property
    def checkpoint_memory(self) -> str:
        """
        with rollback 'checkpoint': where the per-step checkpoints live, 'device' (copies within the memory that holds the state) or 'host', 'device and host' where the two models differ; '' with 'kv'
        """
    @property
    def drafter(self) -> str:
        """
        who drafted: 'model', 'lookup', 'model+lookup' or 'none'
        """
    @property
    def host_sampling_reason(self) -> str:
        """
        why the host sampled ('' where it did not): 'grammar', 'logit bias or penalties', 'top_k 0 ...', 'log-probabilities of greedy decoding', 'draft of another vocabulary', 'device sampling off', 'auto: the model runs on the CPU', 'the backend cannot run the chain'
        """
    @property
    def logits_bytes(self) -> int:
        """
        after the prompt, bytes of logits both models' decodes wrote out for the host (a row of n_vocab floats per drafted or verified position; with device sampling, each row's candidates and their logits)
        """
    @property
    def logits_bytes_per_token(self) -> float:
        """
        logits_bytes per generated token
        """
    @property
    def mean_accepted_length(self) -> float:
        """
        tokens emitted per verification step
        """
    @property
    def n_accepted(self) -> int:
        """
        of which the target kept
        """
    @property
    def n_ahead_drafted(self) -> int:
        """
        tokens drafted while the target verified (GenerateOptions.draft_ahead)
        """
    @property
    def n_ahead_used(self) -> int:
        """
        of which became a later step's drafts
        """
    @property
    def n_draft_calls(self) -> int:
        """
        after the prompt, the draft model's llama_decode calls (not counted with mode dsi)
        """
    @property
    def n_drafted(self) -> int:
        """
        tokens proposed by the drafter
        """
    @property
    def n_forced_accepted(self) -> int:
        """
        of which the target kept
        """
    @property
    def n_forced_drafted(self) -> int:
        """
        of the drafted tokens, those the grammar forced (GenerateOptions.forced_drafts)
        """
    @property
    def n_generated(self) -> int:
        """
        tokens emitted
        """
    @property
    def n_lookup_accepted(self) -> int:
        """
        of which the target kept
        """
    @property
    def n_lookup_drafted(self) -> int:
        """
        of the drafted tokens, those prompt lookup proposed
        """
    @property
    def n_paused_steps(self) -> int:
        """
        steps the adaptive rule took without the draft model (drafting did not pay)
        """
    @property
    def n_prediction_accepted(self) -> int:
        """
        of which the target kept
        """
    @property
    def n_prediction_drafted(self) -> int:
        """
        of the drafted tokens, those the request's prediction proposed (GenerateParams.prediction)
        """
    @property
    def n_probe_reads(self) -> int:
        """
        probes that began with the draft reading what it sat out (Decoder.settle_steps > 0, as on a GPU)
        """
    @property
    def n_probe_reads_off(self) -> int:
        """
        of which the read called off: at the acceptance it judged drafting would not win back what a probe costs, and the step was plain
        """
    @property
    def n_prompt(self) -> int:
        """
        prompt tokens
        """
    @property
    def n_prompt_cached(self) -> int:
        """
        of which were reused from the cache
        """
    @property
    def n_prompt_reused(self) -> int:
        """
        of those, moved to new positions after an edit (GenerateOptions.cache_reuse)
        """
    @property
    def n_prompt_shared(self) -> int:
        """
        prompt tokens the draft took from the target's cache instead of processing
        """
    @property
    def n_redecoded(self) -> int:
        """
        tokens decoded again after restoring a checkpoint, or from the start where none was saved (both models)
        """
    @property
    def n_resume_shared(self) -> int:
        """
        tokens the draft took from the target's cache instead of processing when the model drafted again after sitting out steps
        """
    @property
    def n_steps(self) -> int:
        """
        target verification passes
        """
    @property
    def n_thread_probes(self) -> int:
        """
        decodes of either model run at another thread count than the tuned one, to compare (a slot's: those of all slots, whose decodes share the contexts)
        """
    @property
    def n_threads(self) -> int:
        """
        the CPU threads the target's decodes used at the end (the tuned count, where tuned; 0 with mode dsi, whose DSIStats has its counts)
        """
    @property
    def n_threads_draft(self) -> int:
        """
        the same for the draft model (0 where it did not run)
        """
    @property
    def n_window_catch_ups(self) -> int:
        """
        probes of a paused draft model that caught up on (or read) the last tokens alone, not everything since the pause
        """
    @property
    def rollback(self) -> str:
        """
        how rejected drafts leave the models' memory: 'kv' (the KV cache drops its tail) or 'checkpoint' (a recurrent or hybrid model restores a saved state and decodes the kept tokens again)
        """
    @property
    def sampling(self) -> str:
        """
        where the rows were sampled (GenerateOptions.device_sampling): 'device', 'host', or 'device (target), host (draft)' and the reverse
        """
    @property
    def steps(self) -> list[StepTrace]:
        """
        a StepTrace per step with GenerateOptions.record_steps, else empty
        """
    @property
    def t_accept_ms(self) -> float:
        """
        target sampling and the acceptance rule
        """
    @property
    def t_decode_ms(self) -> float:
        """
        after the prompt, time inside llama_decode, both models (0 with mode dsi)
        """
    @property
    def t_draft_ms(self) -> float:
        """
        draft decodes and draft sampling
        """
    @property
    def t_draft_sample_ms(self) -> float:
        """
        of t_draft_ms, choosing the drafted tokens from the draft's logits (its sampling, or its top two tokens at temperature 0)
        """
    @property
    def t_host_ms(self) -> float:
        """
        after the prompt, the loop's work on the host outside llama_decode: t_draft_sample_ms, t_accept_ms and the rest (not measured with mode dsi)
        """
    @property
    def t_other_ms(self) -> float:
        """
        time in the loop outside model calls and acceptance
        """
    @property
    def t_prefill_ms(self) -> float:
        """
        prompt processing
        """
    @property
    def t_rollback_ms(self) -> float:
        """
        time of checkpoints, restores and the decodes after them (both models)
        """
    @property
    def t_total_ms(self) -> float:
        """
        the whole call
        """
    @property
    def t_verify_ms(self) -> float:
        """
        target decodes
        """
    @property
    def t_vocab_ms(self) -> float:
        """
        of t_draft_ms, pairing a draft of another vocabulary with the target: moving its logits to the target's ids and converting tokens
        """
    @property
    def threads_tuned(self) -> bool:
        """
        whether a model's thread count was tuned by measuring its decodes (n_threads -1, and the model on the CPU alone): fewer threads where another process keeps a core busy
        """
    @property
    def tokens_per_second(self) -> float:
        """
        n_generated over the time after prefill
        """
    @property
    def vocab(self) -> str:
        """
        how the draft model's tokens reached the target: 'same' (one vocabulary), 'intersection' (another vocabulary: the tokens both share, by text) or 'none' (the model did not draft)
        """
    @property
    def vocab_shared(self) -> float:
        """
        share of the draft's tokens that the target has (1.0 with one vocabulary)
        """
class DSIStats:
    """
    What the DSI orchestrator did. Server times are summed over servers, so they can exceed the wall time.
    """
    @staticmethod
    def as_dict(obj) -> dict:
        """
        A Stats, DSIStats, StepTrace or StepPrices as a plain dict of its fields (for JSON; Stats.steps
            as a list of dicts).
        """
    @property
    def lookahead(self) -> int:
        """
        drafted tokens per verification task
        """
    @property
    def n_accepted(self) -> int:
        """
        of which were kept
        """
    @property
    def n_checked(self) -> int:
        """
        drafts the target judged
        """
    @property
    def n_draft_prompt(self) -> int:
        """
        prompt tokens the draft model read in its thread while the target started (0 where its cache held them, or it copied the target's keys and values before the run, or the run ended first)
        """
    @property
    def n_drafted(self) -> int:
        """
        tokens the drafter proposed, cancelled ones included
        """
    @property
    def n_padded(self) -> int:
        """
        tokens the servers decoded as padding
        """
    @property
    def n_server_prompt(self) -> int:
        """
        prompt tokens the servers beyond the first read in their threads while the first started (summed; 0 where they copied the first server's keys and values before the run)
        """
    @property
    def n_server_tasks(self) -> list[int]:
        """
        verification tasks sent to each server (a server reading the prompt gets none)
        """
    @property
    def n_target_only(self) -> int:
        """
        tokens emitted from the target with no draft beside them
        """
    @property
    def n_tasks(self) -> int:
        """
        verification tasks sent to servers
        """
    @property
    def n_tasks_cancelled(self) -> int:
        """
        of which were cancelled or built on a rejected draft
        """
    @property
    def n_threads_draft(self) -> int:
        ...
    @property
    def n_threads_server(self) -> int:
        """
        per server
        """
    @property
    def overlap(self) -> bool:
        """
        False: SI on the same code path
        """
    @property
    def pad_to(self) -> int:
        """
        the length the servers padded their batches to (verify_shape; 0: not padded)
        """
    @property
    def sp(self) -> int:
        """
        target servers
        """
    @property
    def t_draft_idle_ms(self) -> float:
        """
        the drafter waiting for verification
        """
    @property
    def t_draft_ms(self) -> float:
        """
        the drafter computing
        """
    @property
    def t_draft_prompt_ms(self) -> float:
        """
        its time reading them
        """
    @property
    def t_total_ms(self) -> float:
        ...
    @property
    def t_verify_hidden_ms(self) -> float:
        """
        used verification time the drafter did not wait for
        """
    @property
    def t_verify_ms(self) -> float:
        """
        servers computing
        """
    @property
    def t_verify_wasted_ms(self) -> float:
        """
        of which on cancelled tasks
        """
    @property
    def verify_hidden_share(self) -> float:
        """
        t_verify_hidden_ms over the used verification time
        """
class TokenLogprob:
    """
    An emitted token's log-probability under the target's final distribution at its position, and the likeliest tokens there (GenerateOptions.logprobs of them).
    """
    def __repr__(self) -> str:
        ...
    @property
    def logprob(self) -> float:
        ...
    @property
    def token(self) -> int:
        ...
    @property
    def top(self) -> list[tuple[int, float]]:
        """
        [(token, logprob)], most likely first
        """
class Completion:
    """
    The result of a generation.
    """
    @property
    def context_full(self) -> bool:
        """
        True when 'length' came from the context having no room left
        """
    @property
    def dsi(self) -> DSIStats | None:
        """
        DSIStats (mode 'dsi'), else None
        """
    @property
    def finish_reason(self) -> str:
        """
        'stop' (end token or stop string), 'length' (max_tokens or context full), 'cancelled'
        """
    @property
    def logprobs(self) -> list[TokenLogprob]:
        """
        a TokenLogprob per token with GenerateOptions.logprobs, else empty
        """
    @property
    def stats(self) -> Stats:
        ...
    @property
    def text(self) -> str:
        ...
    @property
    def tokens(self) -> list[int]:
        ...
class Decoder:
    """
    A target model, an optional draft model, and their KV caches.
    """
    def __init__(self, target: str | os.PathLike, draft: str | os.PathLike | None = None, n_ctx: typing.SupportsInt | typing.SupportsIndex = 4096, n_batch: typing.SupportsInt | typing.SupportsIndex = 512, n_threads: typing.SupportsInt | typing.SupportsIndex = 0, n_threads_draft: typing.SupportsInt | typing.SupportsIndex = 0, n_gpu_layers: typing.SupportsInt | typing.SupportsIndex = 0, n_gpu_layers_draft: typing.SupportsInt | typing.SupportsIndex = 0, n_draft: typing.SupportsInt | typing.SupportsIndex = 10, share_prefill: bool = True, swa_full: bool = True, device: typing.Any = None, device_draft: typing.Any = None, split_mode: str = 'layer', tensor_split: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex] | None = None, main_gpu: typing.SupportsInt | typing.SupportsIndex = 0, dsi_devices: collections.abc.Sequence[typing.Any] = [], checkpoint_memory: str = 'auto', draft_catch_up: str = 'auto', verify_shape: str = 'auto', settle_steps: typing.SupportsInt | typing.SupportsIndex = -1, probe_reads: bool = True, cache_types: typing.Annotated[collections.abc.Sequence[str], "FixedSize(4)"] = ['f16', 'f16', 'f16', 'f16'], flash_attn: str = 'auto') -> None:
        ...
    def adaptive_state(self) -> list[float]:
        """
        what the adaptive draft length has learned (DraftLengthModel.state)
        """
    def cached_tokens(self) -> list[int]:
        ...
    def cost_model(self) -> dict:
        """
        The adaptive draft length's estimates: ms per draft token, ms per catch-up, ms per verification batch, the long-run tokens per ms, and the chance of acceptance by draft confidence.
        """
    def draft_cached_tokens(self) -> list[int]:
        """
        tokens in the draft's cache (its own vocabulary's)
        """
    def draft_view_of(self, target_tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex]) -> list[int]:
        """
        target tokens as the draft reads them: the same tokens with one vocabulary, else each as its partner in the draft's vocabulary or spelled with draft tokens
        """
    def drafter_name(self, options: GenerateOptions) -> str:
        """
        who drafts in a generation with these options: 'model', 'lookup', 'model+lookup' or 'none'
        """
    def generate(self, prompt: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], options: GenerateOptions, on_step: collections.abc.Callable | None = None) -> Completion:
        """
        Generate after prompt (token ids). on_step(tokens, text, n_drafted, n_accepted) runs after every verification step (with options.logprobs set, a fifth argument: the tokens' TokenLogprob entries); returning True stops.
        """
    def reset(self) -> None:
        ...
    def set_adaptive_state(self, state: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]) -> None:
        """
        start the adaptive draft length from a state an earlier decoder of the same pair, machine and settings learned (ValueError where it is not one of this format; nothing changes then)
        """
    def sibling(self, **kwargs) -> Decoder:
        """
        a decoder on these models (not loaded again) with caches and an adaptive draft length of its own; keyword arguments change settings (n_ctx, n_batch, n_threads, n_threads_draft, n_draft, share_prefill, swa_full, checkpoint_memory, draft_catch_up, verify_shape, settle_steps), the rest are this one's
        """
    def slot_round_rates(self, n_generating: typing.SupportsInt | typing.SupportsIndex) -> dict:
        """
        for a slot: its group's expected tokens per ms of a round of n_generating slots, by k = 0, 1, ...: 'model': every slot drafts k tokens with the model; 'lookup': one slot adds k prompt-lookup drafts to plain steps (negative while not priced; empty lists for a decoder that is not a slot); 'acceptance': the rate at which the target kept the model drafts it judged (negative while none was)
        """
    def slots(self, n: typing.SupportsInt | typing.SupportsIndex, n_ctx: typing.SupportsInt | typing.SupportsIndex = 0, max_wait_us: typing.SupportsInt | typing.SupportsIndex = 100000) -> list:
        """
        n decoders on these models (not loaded again) whose caches, of n_ctx positions each (0: this one's), are sequences of one context per model. One native thread runs all their decodes and merges those sent at the same time: slots generating in parallel threads verify in one llama_decode and draft in one. max_wait_us: how long a decode is held for slots still busy between decodes.
        """
    def validate(self, options: GenerateOptions) -> None:
        """
        raise ValueError naming the first option this decoder cannot run with
        """
    def warm_up(self) -> None:
        """
        decode once, and roll back, each shape a generation's steps use, then price the target's steps for the adaptive rule (done on creation where a model is on a local GPU); the caches keep what they hold
        """
    @property
    def cross_vocab(self) -> typing.Any:
        """
        None when the draft shares the target's vocabulary; else how the two pair: n_shared tokens, as shares of the draft's and of the target's tokens
        """
    @property
    def draft_catch_up(self) -> str:
        """
        'batch', 'tokens' ('' without a draft)
        """
    @property
    def draft_model(self) -> Model:
        ...
    @property
    def has_draft(self) -> bool:
        ...
    @property
    def is_slot(self) -> bool:
        """
        whether this decoder is one of slots()'s
        """
    @property
    def n_ctx(self) -> int:
        ...
    @property
    def n_draft(self) -> int:
        ...
    @property
    def probe_reads(self) -> bool:
        """
        whether a paused draft's probes read first where settle_steps is above 0
        """
    @property
    def settle_steps(self) -> int:
        """
        steps of a run of drafting (or plain) steps the adaptive length takes as transitions
        """
    @property
    def shares_prefill(self) -> bool:
        ...
    @property
    def slot_chunks(self) -> int:
        """
        the slots' decodes merged into them (slot_chunks / slot_decodes: slots per decode)
        """
    @property
    def slot_decodes(self) -> int:
        """
        llama_decode calls this slot's group has made
        """
    @property
    def target_model(self) -> Model:
        ...
    @property
    def verify_shape(self) -> str:
        """
        'exact', 'padded', or 'auto' (padded where the target samples on its device)
        """
def accept_trials(p: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], q: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], n_trials: typing.SupportsInt | typing.SupportsIndex, seed: typing.SupportsInt | typing.SupportsIndex = 0, rule: str = 'rejection') -> numpy.typing.NDArray[numpy.int32]:
    """
    Run one speculative step n_trials times on fixed per-position target (p) and draft (q) distributions: drafts are drawn from q, then the rule runs ('rejection', llama.cpp's sample-and-'match', or 'keyed': both sides' draws keyed by position, a new key per trial). Returns int32 [n_trials, n_draft + 1]: the emitted tokens of each trial, padded with -1.
    """
def candidates_distribution(logits: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], ids: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], temperature: typing.SupportsFloat | typing.SupportsIndex = 0.800000011920929, top_p: typing.SupportsFloat | typing.SupportsIndex = 0.949999988079071, min_p: typing.SupportsFloat | typing.SupportsIndex = 0.05000000074505806) -> tuple[list[int], list[float]]:
    """
    The distribution the chain draws from when only a top-k row's candidates are known (logits[i] is ids[i]'s, in any order), as device sampling returns them: (ids most likely first, equal logits lower id first; their probabilities).
    """
def chat_apply_template(template: str, messages: collections.abc.Sequence[tuple[str, str]], add_assistant: bool = True) -> str:
    ...
def chat_builtin_templates() -> list[str]:
    """
    the names of llama.cpp's built-in chat templates (chat_apply_template takes one as its template)
    """
def check_text(text: typing.Any, what: str = 'the text') -> int:
    """
    The UTF-8 length of text in bytes; ValueError saying where and how to fix it when UTF-8 cannot carry it (a lone surrogate, as Python makes from bytes that are not UTF-8).
    """
def cpu_cores() -> tuple[int, int]:
    """
    (physical, logical) cores this process may run on; the default thread count is the physical.
    """
def default_devices() -> list:
    """
    The devices a model goes to where none is named (llama.cpp's default: every local GPU), as (name, memory_free in bytes); empty where the installed libllama has none.
    """
def list_devices() -> list:
    """
    Every device the installed libllama can use (the CPU, GPUs, the rpc-servers added so far): name, description, type (cpu, gpu, igpu, accel), memory_free and memory_total in bytes.
    """
def log_reclaim() -> None:
    """
    Route llama.cpp's log through specllama's filter again, where another user of libllama in this process (llama-cpp-python, when imported) has set its own.
    """
def log_set_level(level: typing.SupportsInt | typing.SupportsIndex) -> None:
    """
    Show llama.cpp messages at or above level (0 none, 1 debug, 2 info, 3 warn, 4 error).
    """
def model_footprint(path: str, cache_type_k: str = 'f16', cache_type_v: str = 'f16') -> dict:
    """
    What a GGUF model needs in a device's memory, from its metadata and tensor table: n_layer, n_vocab, n_embd, n_head, n_ctx_train, layer_bytes (the repeating layers' weights), output_bytes (the output layer), other_bytes (the input embeddings and the rest), kv_bytes_per_position (keys and values of every layer, in the cache formats named). A file ggml cannot parse, or a format not known, is a ValueError.
    """
def model_identity(path: str | os.PathLike) -> dict:
    """
    What a GGUF file is, from its metadata and tensor table (no weights are read): architecture, type, name, basename, finetune, size_label (general.*; '' where absent), n_params (elements of this file's tensors), n_block (its tensors of model layers), n_vocab, vocab_hash (over the tokenizer's model and every token's text: equal for files of one vocabulary), split_no and split_count. A file ggml cannot parse is a ValueError.
    """
def quantize(src: str | os.PathLike, dst: str | os.PathLike, type: str, n_threads: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
    ...
def quantize_types() -> list[str]:
    ...
def rpc_add_servers(endpoints: typing.Any, timeout_ms: typing.SupportsInt | typing.SupportsIndex = 5000) -> list[str]:
    """
    Register rpc-servers ('HOST:PORT,...' or a list); returns their device names. An unreachable one is a ValueError.
    """
def rpc_endpoint(device: str) -> str:
    """
    The rpc-server (HOST:PORT) serving the device named device, or '' for a device of this machine.
    """
def rpc_failure_message() -> str:
    """
    llama.cpp's message for the latest broken RPC connection.
    """
def rpc_failures() -> int:
    """
    Connections to rpc-servers that broke in this process so far (llama.cpp's client would have aborted; the thread that met the break is parked instead).
    """
def rpc_park_breaks() -> None:
    """
    From now on, a broken connection to an rpc-server parks the thread that met it and is counted (rpc_failures), instead of aborting the process as llama.cpp does; for callers that watch the count while they wait (specllama.rpc_guard).
    """
def rpc_serve(endpoint: str, n_threads: typing.SupportsInt | typing.SupportsIndex = 0, device: typing.Any = None, cache_dir: str = '') -> None:
    """
    Serve this machine's devices to llama.cpp's RPC clients at HOST:PORT (llama.cpp's own rpc-server); returns only if the server fails to start.
    """
def sampling_distribution(logits: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], temperature: typing.SupportsFloat | typing.SupportsIndex = 0.800000011920929, top_k: typing.SupportsInt | typing.SupportsIndex = 40, top_p: typing.SupportsFloat | typing.SupportsIndex = 0.949999988079071, min_p: typing.SupportsFloat | typing.SupportsIndex = 0.05000000074505806, infill_model: Model = None, *, logit_bias: collections.abc.Mapping[typing.SupportsInt | typing.SupportsIndex, typing.SupportsFloat | typing.SupportsIndex] = {}, repeat_penalty: typing.SupportsFloat | typing.SupportsIndex = 1.0, repeat_last_n: typing.SupportsInt | typing.SupportsIndex = 64, presence_penalty: typing.SupportsFloat | typing.SupportsIndex = 0.0, frequency_penalty: typing.SupportsFloat | typing.SupportsIndex = 0.0, history: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex] = []) -> numpy.typing.NDArray[numpy.float32]:
    """
    The distribution (dense, float32) a sampler with these settings draws from; temperature 0 is one-hot argmax. infill_model: then llama.cpp's infill sampler, with that model's vocabulary. logit_bias ({token: bias}) and the repetition penalties over the last repeat_last_n tokens of history come first, as in llama.cpp's chain.
    """
def simulate_dsi(target_ms: typing.SupportsFloat | typing.SupportsIndex, drafter_ms: typing.SupportsFloat | typing.SupportsIndex, drafter_right: collections.abc.Sequence[bool], lookahead: typing.SupportsInt | typing.SupportsIndex = 4, sp: typing.SupportsInt | typing.SupportsIndex = 1, overlap: bool = True, n_prompt: typing.SupportsInt | typing.SupportsIndex = 1, seed: typing.SupportsInt | typing.SupportsIndex = 0, prompt_ms: typing.SupportsFloat | typing.SupportsIndex = 0.0, draft_prompt_ms: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> tuple[DSIStats, int, bool]:
    """
    Run the DSI orchestrator (overlap=False: SI; with lookahead=0 too: non-SI) against simulated servers whose forward pass waits target_ms and a drafter that waits drafter_ms per token and proposes the target's token where drafter_right[i] is true. prompt_ms > 0: every server but the first reads the prompt in its thread as the run starts, a wait of prompt_ms (the first server holds it); draft_prompt_ms > 0: the drafter likewise. Returns (DSIStats, tokens emitted, whether the output equals the simulated target's).
    """
def supports_gpu_offload() -> bool:
    ...
def supports_rpc() -> bool:
    """
    Whether the installed libllama has llama.cpp's RPC backend (built with -DGGML_RPC=ON).
    """
def vocab_difference(target: Model, draft: Model) -> str:
    """
    The first difference between draft's vocabulary and target's, in words; '' when they are one (a draft with another vocabulary drafts by token-level intersection).
    """
ADAPTIVE_STATE_FORMAT: int = 1
CACHE_TYPES: tuple = ('f32', 'f16', 'bf16', 'q8_0', 'q4_0', 'q4_1', 'iq4_nl', 'q5_0', 'q5_1')
DECODER_DEFAULTS: dict = {'n_ctx': 4096, 'n_batch': 512, 'n_threads': 0, 'n_threads_draft': 0, 'n_gpu_layers': 0, 'n_gpu_layers_draft': 0, 'n_draft': 10, 'share_prefill': True, 'swa_full': True, 'checkpoint_memory': 'auto', 'draft_catch_up': 'auto', 'verify_shape': 'auto', 'settle_steps': -1, 'probe_reads': True, 'cache_type_k': 'f16', 'cache_type_v': 'f16', 'cache_type_k_draft': 'f16', 'cache_type_v_draft': 'f16', 'flash_attn': 'auto'}
MAX_DRAFT: int = 64
MAX_SERVERS: int = 64
