// bindings/bind_stats.cpp: what a generation returns: GenerateResult, its Stats (with a StepTrace
// per step where asked) and, with mode dsi, DSIStats.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "speculative/decoder.h"

namespace py = pybind11;
using namespace specllama;

namespace specllama_py {

namespace {

void register_step_trace(py::module_ & m) {
    py::class_<step_trace>(m, "StepTrace",
                           "One step of a generation (GenerateOptions.record_steps): what the adaptive rule saw.")
        .def_property_readonly("n_model", [](const step_trace & t) { return t.record.n_model; },
                               "tokens the draft model drafted")
        .def_property_readonly("n_drafted", [](const step_trace & t) { return t.record.n; },
                               "tokens drafted in all (the model's, then prompt lookup's)")
        .def_property_readonly("n_accepted", [](const step_trace & t) { return t.record.n_accepted; },
                               "of which the target kept")
        .def_property_readonly("conf", [](const step_trace & t) { return t.record.conf; },
                               "the draft model's confidence in each of its tokens")
        .def_property_readonly("draft_ms", [](const step_trace & t) { return t.record.draft_ms; },
                               "the step's drafting (as priced: StepPrices where given)")
        .def_property_readonly("catch_up_ms", [](const step_trace & t) { return t.record.catch_up_ms; },
                               "of which the draft's catch-up decode")
        .def_property_readonly("verify_ms", [](const step_trace & t) { return t.record.verify_ms; },
                               "the verification (as priced)")
        .def_property_readonly("n_verified", [](const step_trace & t) { return t.record.n_verified; },
                               "tokens the verification decoded: the target's last token and the drafts, "
                               "and copies of the last where the batch was padded (verify_shape)")
        .def_property_readonly("n_prompt", [](const step_trace & t) { return t.record.n_prompt; },
                               "prompt tokens the verification's decode took in before them (the first step's: "
                               "the part of the prompt the cache lacked; verify_ms is then their pass too). "
                               "0 with StepPrices, which price the prompt apart")
        .def_property_readonly("resumed", [](const step_trace & t) { return t.record.resumed; },
                               "the draft's catch-up took in more tokens than one step brings (what it sat "
                               "out while paused, or a new prompt): catch_up_ms is then that read")
        .def_readonly("n_max", &step_trace::n_max, "tokens the step could draft at most")
        .def_readonly("paused", &step_trace::paused, "the draft model was paused (drafting did not pay)")
        .def_readonly("probe", &step_trace::probe, "the step was a probe of the paused draft model")
        .def_readonly("read", &step_trace::read,
                      "it began with a probe's read of what the draft sat out (a plain step where the read "
                      "called the probe off)")
        .def_readonly("read_n", &step_trace::read_n, "the positions that read judged (0: no read)")
        .def_readonly("read_foretold", &step_trace::read_foretold,
                      "the sum over them of the chance that the target would have kept the draft's token there "
                      "(greedy: the positions where the draft's top token was the token that came next)")
        .def_readonly("read_ms", &step_trace::read_ms,
                      "what the read cost in ms (as priced, with GenerateOptions.prices); it is not in draft_ms")
        .def_readonly("rate", &step_trace::rate, "the rule's long-run tokens per ms when the step began")
        .def_readonly("acceptance", &step_trace::acceptance, "its overall acceptance estimate then");
}

}  // namespace

void register_stats(py::module_ & m) {
    register_step_trace(m);
    using gs = generate_stats;
    py::class_<gs>(m, "Stats", "What one generation did, and where its time went.")
        .def_readonly("n_prompt", &gs::n_prompt, "prompt tokens")
        .def_readonly("n_prompt_cached", &gs::n_prompt_cached, "of which were reused from the cache")
        .def_readonly("n_prompt_reused", &gs::n_prompt_reused,
                      "of those, moved to new positions after an edit (GenerateOptions.cache_reuse)")
        .def_readonly("n_prompt_shared", &gs::n_prompt_shared,
                      "prompt tokens the draft took from the target's cache instead of processing")
        .def_readonly("n_resume_shared", &gs::n_resume_shared,
                      "tokens the draft took from the target's cache instead of processing when the model "
                      "drafted again after sitting out steps")
        .def_readonly("n_generated", &gs::n_generated, "tokens emitted")
        .def_readonly("n_steps", &gs::n_steps, "target verification passes")
        .def_readonly("n_drafted", &gs::n_drafted, "tokens proposed by the drafter")
        .def_readonly("n_accepted", &gs::n_accepted, "of which the target kept")
        .def_readonly("n_lookup_drafted", &gs::n_lookup_drafted, "of the drafted tokens, those prompt lookup proposed")
        .def_readonly("n_lookup_accepted", &gs::n_lookup_accepted, "of which the target kept")
        .def_readonly("n_prediction_drafted", &gs::n_prediction_drafted,
                      "of the drafted tokens, those the request's prediction proposed (GenerateParams.prediction)")
        .def_readonly("n_prediction_accepted", &gs::n_prediction_accepted, "of which the target kept")
        .def_readonly("n_forced_drafted", &gs::n_forced_drafted,
                      "of the drafted tokens, those the grammar forced (GenerateOptions.forced_drafts)")
        .def_readonly("n_forced_accepted", &gs::n_forced_accepted, "of which the target kept")
        .def_readonly("n_ahead_drafted", &gs::n_ahead_drafted,
                      "tokens drafted while the target verified (GenerateOptions.draft_ahead)")
        .def_readonly("n_ahead_used", &gs::n_ahead_used, "of which became a later step's drafts")
        .def_readonly("n_window_catch_ups", &gs::n_window_catch_ups,
                      "probes of a paused draft model that caught up on (or read) the last tokens alone, not "
                      "everything since the pause")
        .def_readonly("n_probe_reads", &gs::n_probe_reads,
                      "probes that began with the draft reading what it sat out (Decoder.settle_steps > 0, as on "
                      "a GPU)")
        .def_readonly("n_probe_reads_off", &gs::n_probe_reads_off,
                      "of which the read called off: at the acceptance it judged drafting would not win back what a "
                      "probe costs, and the step was plain")
        .def_readonly("n_paused_steps", &gs::n_paused_steps,
                      "steps the adaptive rule took without the draft model (drafting did not pay)")
        .def_readonly("accepted_hist", &gs::accepted_hist, "accepted_hist[k]: steps that kept k drafted tokens")
        .def_readonly("steps", &gs::steps, "a StepTrace per step with GenerateOptions.record_steps, else empty")
        .def_readonly("drafter", &gs::drafter, "who drafted: 'model', 'lookup', 'model+lookup' or 'none'")
        .def_readonly("acceptance", &gs::acceptance,
                      "how the target's tokens were drawn and drafts judged: 'greedy' (temperature 0), "
                      "'rejection', 'keyed' (a seeded generation's default: the tokens are plain decoding's with "
                      "that seed) or 'match' (GenerateOptions.acceptance); set where nothing was drafted too")
        .def_readonly("vocab", &gs::vocab,
                      "how the draft model's tokens reached the target: 'same' (one vocabulary), 'intersection' "
                      "(another vocabulary: the tokens both share, by text) or 'none' (the model did not draft)")
        .def_readonly("rollback", &gs::rollback,
                      "how rejected drafts leave the models' memory: 'kv' (the KV cache drops its tail) or "
                      "'checkpoint' (a recurrent or hybrid model restores a saved state and decodes the kept "
                      "tokens again)")
        .def_readonly("checkpoint_memory", &gs::checkpoint_memory,
                      "with rollback 'checkpoint': where the per-step checkpoints live, 'device' (copies "
                      "within the memory that holds the state) or 'host', 'device and host' where the two "
                      "models differ; '' with 'kv'")
        .def_readonly("t_rollback_ms", &gs::t_rollback_ms,
                      "time of checkpoints, restores and the decodes after them (both models)")
        .def_readonly("n_redecoded", &gs::n_redecoded,
                      "tokens decoded again after restoring a checkpoint, or from the start where none was "
                      "saved (both models)")
        .def_readonly("vocab_shared", &gs::vocab_shared,
                      "share of the draft's tokens that the target has (1.0 with one vocabulary)")
        .def_readonly("t_prefill_ms", &gs::t_prefill_ms, "prompt processing")
        .def_readonly("t_draft_ms", &gs::t_draft_ms, "draft decodes and draft sampling")
        .def_readonly("t_vocab_ms", &gs::t_vocab_ms,
                      "of t_draft_ms, pairing a draft of another vocabulary with the target: moving its logits "
                      "to the target's ids and converting tokens")
        .def_readonly("t_verify_ms", &gs::t_verify_ms, "target decodes")
        .def_readonly("t_accept_ms", &gs::t_accept_ms, "target sampling and the acceptance rule")
        .def_readonly("t_draft_sample_ms", &gs::t_draft_sample_ms,
                      "of t_draft_ms, choosing the drafted tokens from the draft's logits (its sampling, or its "
                      "top two tokens at temperature 0)")
        .def_readonly("t_decode_ms", &gs::t_decode_ms,
                      "after the prompt, time inside llama_decode, both models (0 with mode dsi)")
        .def_readonly("t_total_ms", &gs::t_total_ms, "the whole call")
        .def_property_readonly("acceptance_rate", &gs::acceptance_rate, "n_accepted / n_drafted")
        .def_property_readonly("tokens_per_second", &gs::tokens_per_second, "n_generated over the time after prefill")
        .def_property_readonly("t_other_ms", &gs::t_other_ms, "time in the loop outside model calls and acceptance")
        .def_property_readonly("t_host_ms", &gs::t_host_ms,
                               "after the prompt, the loop's work on the host outside llama_decode: t_draft_sample_ms, "
                               "t_accept_ms and the rest (not measured with mode dsi)")
        .def_readonly("logits_bytes", &gs::logits_bytes,
                      "after the prompt, bytes of logits both models' decodes wrote out for the host (a row of "
                      "n_vocab floats per drafted or verified position; with device sampling, each row's "
                      "candidates and their logits)")
        .def_readonly("n_draft_calls", &gs::n_draft_calls,
                      "after the prompt, the draft model's llama_decode calls (not counted with mode dsi)")
        .def_readonly("n_threads", &gs::n_threads,
                      "the CPU threads the target's decodes used at the end (the tuned count, where tuned; 0 with "
                      "mode dsi, whose DSIStats has its counts)")
        .def_readonly("n_threads_draft", &gs::n_threads_draft,
                      "the same for the draft model (0 where it did not run)")
        .def_readonly("threads_tuned", &gs::threads_tuned,
                      "whether a model's thread count was tuned by measuring its decodes (n_threads -1, and the "
                      "model on the CPU alone): fewer threads where another process keeps a core busy")
        .def_readonly("n_thread_probes", &gs::n_thread_probes,
                      "decodes of either model run at another thread count than the tuned one, to compare (a "
                      "slot's: those of all slots, whose decodes share the contexts)")
        .def_readonly("sampling", &gs::sampling,
                      "where the rows were sampled (GenerateOptions.device_sampling): 'device', 'host', or "
                      "'device (target), host (draft)' and the reverse")
        .def_readonly("host_sampling_reason", &gs::host_sampling_reason,
                      "why the host sampled ('' where it did not): 'grammar', 'logit bias or penalties', 'top_k 0 "
                      "...', 'log-probabilities of greedy decoding', 'draft of another vocabulary', 'device sampling "
                      "off', 'auto: the model runs on the CPU', 'the backend cannot run the chain'")
        .def_property_readonly(
            "logits_bytes_per_token",
            [](const gs & s) { return s.n_generated > 0 ? (double) s.logits_bytes / s.n_generated : 0.0; },
            "logits_bytes per generated token")
        .def_property_readonly("mean_accepted_length", &gs::mean_accepted_length,
                               "tokens emitted per verification step");

    py::class_<dsi_report>(m, "DSIStats",
                           "What the DSI orchestrator did. Server times are summed over servers, so they can "
                           "exceed the wall time.")
        .def_readonly("sp", &dsi_report::sp, "target servers")
        .def_readonly("lookahead", &dsi_report::lookahead, "drafted tokens per verification task")
        .def_readonly("n_threads_draft", &dsi_report::n_threads_draft)
        .def_readonly("n_threads_server", &dsi_report::n_threads_server, "per server")
        .def_readonly("overlap", &dsi_report::overlap, "False: SI on the same code path")
        .def_readonly("pad_to", &dsi_report::pad_to,
                      "the length the servers padded their batches to (verify_shape; 0: not padded)")
        .def_readonly("n_padded", &dsi_report::n_padded, "tokens the servers decoded as padding")
        .def_property_readonly("n_tasks", [](const dsi_report & r) { return r.stats.n_tasks; },
                               "verification tasks sent to servers")
        .def_property_readonly("n_tasks_cancelled", [](const dsi_report & r) { return r.stats.n_tasks_cancelled; },
                               "of which were cancelled or built on a rejected draft")
        .def_property_readonly("n_drafted", [](const dsi_report & r) { return r.stats.n_drafted; },
                               "tokens the drafter proposed, cancelled ones included")
        .def_property_readonly("n_checked", [](const dsi_report & r) { return r.stats.n_checked; },
                               "drafts the target judged")
        .def_property_readonly("n_accepted", [](const dsi_report & r) { return r.stats.n_accepted; },
                               "of which were kept")
        .def_property_readonly("n_target_only", [](const dsi_report & r) { return r.stats.n_target_only; },
                               "tokens emitted from the target with no draft beside them")
        .def_property_readonly("t_total_ms", [](const dsi_report & r) { return r.stats.t_total_ms; })
        .def_property_readonly("t_draft_ms", [](const dsi_report & r) { return r.stats.t_draft_ms; },
                               "the drafter computing")
        .def_property_readonly("t_draft_idle_ms", [](const dsi_report & r) { return r.stats.t_draft_idle_ms; },
                               "the drafter waiting for verification")
        .def_property_readonly("n_draft_prompt", [](const dsi_report & r) { return r.stats.n_draft_prompt; },
                               "prompt tokens the draft model read in its thread while the target started (0 "
                               "where its cache held them, or it copied the target's keys and values before "
                               "the run, or the run ended first)")
        .def_property_readonly("t_draft_prompt_ms", [](const dsi_report & r) { return r.stats.t_draft_prompt_ms; },
                               "its time reading them")
        .def_property_readonly("n_server_prompt", [](const dsi_report & r) { return r.stats.n_server_prompt; },
                               "prompt tokens the servers beyond the first read in their threads while the first "
                               "started (summed; 0 where they copied the first server's keys and values before "
                               "the run)")
        .def_property_readonly("n_server_tasks", [](const dsi_report & r) { return r.stats.n_server_tasks; },
                               "verification tasks sent to each server (a server reading the prompt gets none)")
        .def_property_readonly("t_verify_ms", [](const dsi_report & r) { return r.stats.t_verify_ms; },
                               "servers computing")
        .def_property_readonly("t_verify_wasted_ms", [](const dsi_report & r) { return r.stats.t_verify_wasted_ms; },
                               "of which on cancelled tasks")
        .def_property_readonly("t_verify_hidden_ms", &dsi_report::t_verify_hidden_ms,
                               "used verification time the drafter did not wait for")
        .def_property_readonly("verify_hidden_share", &dsi_report::verify_hidden_share,
                               "t_verify_hidden_ms over the used verification time");

    py::class_<token_logprob>(m, "TokenLogprob",
                              "An emitted token's log-probability under the target's final distribution at its "
                              "position, and the likeliest tokens there (GenerateOptions.logprobs of them).")
        .def_readonly("token", &token_logprob::token)
        .def_readonly("logprob", &token_logprob::logprob)
        .def_readonly("top", &token_logprob::top, "[(token, logprob)], most likely first")
        .def("__repr__", [](const token_logprob & t) {
            return "TokenLogprob(token=" + std::to_string(t.token) + ", logprob=" + std::to_string(t.logprob) + ")";
        });
    py::class_<generate_result>(m, "Completion", "The result of a generation.")
        .def_readonly("tokens", &generate_result::tokens)
        .def_property_readonly("text", [](const generate_result & r) { return to_str(r.text); })
        .def_readonly("finish_reason", &generate_result::finish_reason,
                      "'stop' (end token or stop string), 'length' (max_tokens or context full), 'cancelled'")
        .def_readonly("context_full", &generate_result::context_full,
                      "True when 'length' came from the context having no room left")
        .def_readonly("stats", &generate_result::stats)
        .def_readonly("dsi", &generate_result::dsi, "DSIStats (mode 'dsi'), else None")
        .def_readonly("logprobs", &generate_result::logprobs,
                      "a TokenLogprob per token with GenerateOptions.logprobs, else empty");
}

}  // namespace specllama_py
