// bindings/bind_adaptive.cpp: the draft-length rules on their own (the adaptive length of one
// generation, the slots' shared cap) and the thread count's tuner, to check them with given costs
// and to replay recorded traces.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "batching/batch_drafting.h"
#include "bindings.h"
#include "engine/thread_tuner.h"
#include "speculative/draft_length.h"

namespace py = pybind11;
using namespace specllama;

namespace specllama_py {

void register_adaptive(py::module_ & m) {
    // the tuner of a context's thread count on its own, to check it with given costs
    py::class_<thread_tuner>(m, "ThreadTuner",
                             "How many CPU threads a context's decodes use where n_threads is -1: the decodes "
                             "run at the current count, and now and then one runs at another (a quarter fewer, or "
                             "the full count); one that beats the current count's running mean cost for decodes of "
                             "its size by 15%, twice in a row, moves the count there (engine/thread_tuner.h).")
        .def(py::init<int32_t>(), py::arg("max_threads"))
        .def("next", &thread_tuner::next, py::arg("n_tokens"), "The thread count for the next decode, of n_tokens.")
        .def("record", &thread_tuner::record, py::arg("n_tokens"), py::arg("threads"), py::arg("ms"),
             "A decode of n_tokens tokens on threads threads took ms.")
        .def("move_to", &thread_tuner::move_to, py::arg("threads"),
             "Move the current count to threads (clamped to 1..max_threads) without measuring it, as another "
             "model's tuner on the same cores found; probes go on from there.")
        .def_property_readonly("threads", &thread_tuner::threads, "the current count")
        .def_property_readonly("max_threads", &thread_tuner::max_threads)
        .def_property_readonly("n_probes", &thread_tuner::n_probes, "decodes run at another count to compare")
        .def_property_readonly("n_moves", &thread_tuner::n_moves, "changes of the current count");
    // the slots' shared draft-length rule on its own, to check it with given costs
    py::class_<batch_drafting>(m, "BatchDrafting",
                               "How many tokens slots that share their decodes draft while several generate: "
                               "rounds priced from merged decodes' costs by token count and the acceptance rate.")
        .def(py::init<>())
        .def("observe_decode", &batch_drafting::observe_decode, py::arg("draft"), py::arg("n_tokens"), py::arg("ms"),
             py::arg("n_slots") = 1, py::arg("n_generating") = 1,
             "a merged decode of n_tokens from n_slots slots on the draft (or the target) took ms while "
             "n_generating slots generated")
        .def("observe_step", &batch_drafting::observe_step, py::arg("n_judged"), py::arg("n_accepted"),
             py::arg("n_lookup_judged") = 0, py::arg("n_lookup_accepted") = 0,
             "a slot's finished step: the model's drafts the target judged (a draft is judged where every "
             "draft before it was kept) and those it kept, and prompt lookup's")
        .def("observe_verified", &batch_drafting::observe_verified, py::arg("n_model"), py::arg("n_before_lookup"),
             py::arg("n_drafted"), py::arg("n_accepted"),
             "the same from a verified step: n_drafted drafts, the model's first n_model, prompt lookup's from "
             "n_before_lookup, n_accepted of them kept")
        .def("acceptance", &batch_drafting::acceptance, py::arg("lookup") = false,
             "the acceptance rate of the model's judged drafts (lookup: of prompt lookup's); negative while "
             "none was judged")
        .def("cap", &batch_drafting::cap, py::arg("n_generating"), py::arg("n_max"), py::arg("slot") = -1,
             "the most tokens a slot drafts with the model while n_generating slots generate; until the "
             "rounds are priced, one slot (slot: its sequence; -1: any) drafts one token and the others none")
        .def("catch_up_pays", &batch_drafting::catch_up_pays, py::arg("n_generating"), py::arg("k"),
             py::arg("n_unread"), py::arg("n_remaining"),
             "whether a slot whose draft has n_unread tokens to read before drafting k a step wins that back "
             "in its n_remaining tokens (true while the rounds are not priced)")
        .def("leave", &batch_drafting::leave, py::arg("slot"),
             "a slot's generation ended: another slot drafts to price the rounds")
        .def("rate", &batch_drafting::rate, py::arg("n_generating"), py::arg("k"),
             "expected tokens per ms of a round with k drafts per slot (0: plain); negative while unknown")
        .def("lookup_cap", &batch_drafting::lookup_cap, py::arg("n_generating"), py::arg("n_max"),
             "the most prompt-lookup drafts a slot adds to a step without model drafts while n_generating "
             "slots generate")
        .def("lookup_rate", &batch_drafting::lookup_rate, py::arg("n_generating"), py::arg("k"),
             "expected tokens per ms of a round of plain steps where one slot adds k lookup drafts; negative "
             "while unknown")
        .def_property_readonly_static(
            "draft_margin", [](const py::object &) { return batch_drafting::k_draft_margin; },
            "drafting is chosen only where its rate beats plain steps' by this factor");

    // the adaptive draft length's rule on its own, so that recorded traces can be replayed through
    // the exact policy the loop uses (benchmarks/replay_draft_length.py)
    py::class_<draft_length_model>(m, "DraftLengthModel",
                                   "The adaptive draft length's cost and acceptance estimates and its "
                                   "keep-drafting rule (what the decoding loop consults per drafted token).")
        .def(py::init<>())
        .def("pricing", &draft_length_model::pricing, py::arg("adaptive"),
             "whether a step of an adaptive loop is plain, to price plain steps first")
        .def("model_drafts", &draft_length_model::model_drafts, py::arg("adaptive"),
             "at the start of a step that may draft: whether the draft model drafts in it")
        .def(
            "keep_drafting",
            [](const draft_length_model & m, int32_t n_done, float conf, double p_reach, int32_t n_max) {
                const bool more = m.keep_drafting(n_done, conf, p_reach, n_max);
                return py::make_tuple(more, p_reach);
            },
            py::arg("n_done"), py::arg("conf"), py::arg("p_reach"), py::arg("n_max") = 0,
            "after the n_done-th drafted token (confidence conf), in a step of at most n_max drafts (0: "
            "look one token ahead only): (draft another?, the updated p_reach)")
        .def(
            "observe",
            [](draft_length_model & m, int32_t n_model, int32_t n, int32_t n_accepted, std::vector<float> conf,
               int32_t probe, double catch_up_ms, double draft_ms, double verify_ms, int32_t prev_n, int32_t n_decodes,
               int32_t n_catch_up, int32_t n_verified, int32_t n_prompt, bool resumed) {
                if ((int32_t) conf.size() != n_model || n_model > n || n_accepted > n || n_accepted < 0) {
                    throw std::invalid_argument("observe: conf must hold n_model values, n_model <= n, "
                                                "0 <= n_accepted <= n");
                }
                step_record r{n_model, n, n_accepted, std::move(conf), probe, catch_up_ms, draft_ms, verify_ms, prev_n};
                r.n_decodes  = n_decodes;
                r.n_catch_up = n_catch_up;
                r.n_verified = n_verified;
                r.n_prompt   = n_prompt;
                r.resumed    = resumed;
                m.observe(r);
            },
            py::arg("n_model"), py::arg("n"), py::arg("n_accepted"), py::arg("conf"), py::arg("probe"),
            py::arg("catch_up_ms"), py::arg("draft_ms"), py::arg("verify_ms"), py::arg("prev_n"),
            py::arg("n_decodes") = -1, py::arg("n_catch_up") = 0, py::arg("n_verified") = 0, py::arg("n_prompt") = 0,
            py::arg("resumed") = false,
            "a finished step, as the decoding loop reports it (n_decodes: the draft's decodes after its catch-up, "
            "-1: n_model - 1; n_catch_up: the catch-up's decodes where each took one token; n_verified: the tokens "
            "the verification decoded, 0: n + 1; n_prompt: prompt tokens its decode took in first, whose pass "
            "verify_ms then is; resumed: the catch-up read what the draft sat out, and prices no catch-up)")
        .def("verify_ms", &draft_length_model::verify_ms, py::arg("n_tokens"),
             "the estimated ms of a target decode of n_tokens tokens")
        .def("keep_going", &draft_length_model::keep_going, py::arg("n"), py::arg("p_reach"), py::arg("n_max") = 0)
        .def("keep_going_p", &draft_length_model::keep_going_p, py::arg("n"), py::arg("p_reach"), py::arg("p_next"),
             py::arg("draft_cost"), py::arg("n_max") = 0)
        .def("draft_pays", &draft_length_model::draft_pays)
        .def("draft_prompt_pays", &draft_length_model::draft_prompt_pays, py::arg("n_prompt"), py::arg("n_gen"),
             "whether the draft reads n_prompt new prompt tokens before the first step it drafts in, in a "
             "generation of at most n_gen tokens (draft_prompt_after is 0)")
        .def("draft_prompt_after", &draft_length_model::draft_prompt_after, py::arg("n_prompt"), py::arg("n_gen"),
             "the tokens a generation of at most n_gen makes before its draft reads n_prompt new prompt tokens: 0, "
             "before the first step it drafts in; more than n_gen, never")
        .def("observe_generation", &draft_length_model::observe_generation, py::arg("n_tokens"),
             "a finished generation of n_tokens that the draft model could draft in")
        .def_property_readonly("typical_length", &draft_length_model::typical_length,
                               "the median of the last 8 such generations' lengths (-1: fewer than 3)")
        .def("observe_sat_out", &draft_length_model::observe_sat_out, py::arg("n_tokens"),
             "a generation of n_tokens that the draft sat out (a step the model drafts in starts the count again)")
        .def("pays_at_prices", &draft_length_model::pays_at_prices,
             "whether some length of a first batch pays at the prices and acceptance so far (what decides "
             "before any drafting step is measured)")
        .def(
            "priced_excess_ms",
            [](const draft_length_model & m, std::optional<double> acceptance) {
                return acceptance ? m.priced_excess_ms(*acceptance) : m.priced_excess_ms();
            },
            py::arg("acceptance") = py::none(),
            "what a first batch at its best length is predicted to cost beyond plain steps (negative: it pays), "
            "its drafts kept at the acceptance so far (or at this per-draft acceptance)")
        .def("set_padded", &draft_length_model::set_padded, py::arg("n_tokens"),
             "verification batches padded to n_tokens (0: none): a batch of 2 to n_tokens costs one of n_tokens")
        .def_property_readonly("padded", &draft_length_model::padded)
        .def("padded_length", &draft_length_model::padded_length, py::arg("n_max"),
             "the most drafts worth padding a verification for (at most n_max): the fixed length that makes the "
             "most tokens per ms with every verification priced as the padded one; the first batch's length "
             "(3, at most n_max) while unpriced")
        .def_property_readonly("knows_draft_prices", &draft_length_model::knows_draft_prices,
                               "whether padded_length judges on measured prices and 16 judged drafts (until then "
                               "it gives the first batch's length)")
        .def("set_settle_steps", &draft_length_model::set_settle_steps, py::arg("n"),
             "the first n steps of a run of drafting (or plain) steps are transitions: their costs price nothing, "
             "and a probe drafts n + 1 steps in a row")
        .def_property_readonly("settle_steps", &draft_length_model::settle_steps)
        .def("set_decodes_again", &draft_length_model::set_decodes_again, py::arg("yes"),
             "a target whose rollback decodes the kept tokens again (recurrent or hybrid memory)")
        .def("observe_draft_prompt", &draft_length_model::observe_draft_prompt, py::arg("n_tokens"), py::arg("ms"),
             "the draft's prompt pass: it prices a probe's catch-up until a probe is measured")
        .def("observe_checkpoint", &draft_length_model::observe_checkpoint, py::arg("ms"),
             "such a target saved its state in ms: a step's checkpoint and restore, until a batch prices them")
        .def("draft_this_step", &draft_length_model::draft_this_step)
        .def_property_readonly("skipped_steps", &draft_length_model::skipped_steps)
        .def("paused", &draft_length_model::paused,
             "whether the model is left out of steps now, but for probes (a pause ends with a probe that pays)")
        .def_property_readonly("probing", &draft_length_model::probing,
                               "whether the step draft_this_step last began is a probe of a paused model")
        .def("probe_window", &draft_length_model::probe_window, py::arg("n_behind"), py::arg("n_left"),
             "the tokens this probe's catch-up reads of the n_behind its draft sat out, n_left tokens before the "
             "generation ends: the last 32 alone, or 0: all (a new text's first probe, where drafting would win "
             "that read back)")
        .def("probe_gap", &draft_length_model::probe_gap,
             "the steps a paused model sits out before its next probe")
        .def("set_read_probes", &draft_length_model::set_read_probes, py::arg("yes"),
             "probes read first: the draft reads what it sat out, and the probe drafts only where the acceptance "
             "judged there saves, at the prices measured, more than the pause's last drafting probe cost")
        .def_property_readonly("read_probes", &draft_length_model::read_probes)
        .def_property_readonly("read_due", &draft_length_model::read_due,
                               "whether the step draft_this_step just began is a probe that reads first")
        .def("observe_read", &draft_length_model::observe_read, py::arg("n"), py::arg("foretold"), py::arg("ms"),
             py::arg("n_left"),
             "what the read found (n positions; foretold, the sum of the chances that the target would have kept "
             "the draft's token at each: greedy, where its top token came next), what it cost, and the tokens the "
             "generation may still make: whether the probe drafts (false: called off, the step is plain)")
        .def_property_readonly("judged_by_reads", &draft_length_model::judged_by_reads,
                               "whether this kind drafts only where a read says so: it has not drafted, the other "
                               "kind's draft is paused, probes read and every price is known")
        .def_property_readonly("read_acceptance", &draft_length_model::read_acceptance,
                               "the acceptance the pause's reads say (0.8 before any)")
        .def("observe_prompt", &draft_length_model::observe_prompt, py::arg("n_tokens"), py::arg("ms"),
             "the target's prompt pass: it prices a batch's further tokens until a batch is verified")
        .def_property_readonly("knows_plain_step", &draft_length_model::knows_plain_step)
        .def("observe_leave", &draft_length_model::observe_leave, py::arg("excess_ms"))
        .def_property_readonly("leave_ms", &draft_length_model::leave_ms)
        .def("observe_step", &draft_length_model::observe_step, py::arg("tokens"), py::arg("ms"),
             py::arg("model_drafted") = true, py::arg("steady") = true, py::arg("steady_ms") = -1.0)
        .def_property_readonly("rate", &draft_length_model::rate)
        .def("accept_prob", &draft_length_model::accept_prob, py::arg("conf"))
        .def_property_readonly("lookup_accept_prob", &draft_length_model::lookup_accept_prob,
                               "how often the target keeps a prompt lookup proposal (0.5 before any)")
        .def("observe_draft_decode", &draft_length_model::observe_draft_decode, py::arg("ms"))
        .def("observe_catch_up", &draft_length_model::observe_catch_up, py::arg("ms"))
        .def("observe_verify", &draft_length_model::observe_verify, py::arg("n_tokens"), py::arg("ms"))
        .def("observe_acceptance", &draft_length_model::observe_acceptance, py::arg("conf"), py::arg("accepted"))
        .def("verify_ms", &draft_length_model::verify_ms, py::arg("n_tokens"))
        .def_property_readonly("draft_ms", &draft_length_model::draft_ms)
        .def_property_readonly("catch_up_ms", &draft_length_model::catch_up_ms)
        .def("set_sampled", &draft_length_model::set_sampled, py::arg("yes"),
             "the kind of the generations from here on; greedy and sampled ones each keep their own "
             "acceptance, calibration, rates and pause (the prices are shared)")
        .def_property_readonly("sampled", &draft_length_model::sampled)
        .def_property_readonly("acceptance", &draft_length_model::acceptance)
        .def("state", &draft_length_model::state,
             "what the model learned (prices, acceptance, rates, pauses, generation lengths), as numbers, the "
             "state format first; not its settings")
        .def("set_state", &draft_length_model::set_state, py::arg("state"),
             "that state given back (ValueError where it is not one of this format; the model is then unchanged)");
    m.attr("ADAPTIVE_STATE_FORMAT") = draft_length_model::k_state_format;
}

}  // namespace specllama_py
