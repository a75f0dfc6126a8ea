// engine/kv_reuse.cpp: a prompt that shares runs of tokens with the cache at other positions (an
// edit in the middle of a file an editor sends again) keeps those runs' keys and values, moved to
// their new positions, and decodes only the tokens between them.
#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "engine/kv_cache.h"

namespace specllama {

namespace {

// a run of len tokens held at positions [src, src + len) that the new sequence has at [dst, dst + len)
struct run {
    int32_t src = 0;
    int32_t dst = 0;
    int32_t len = 0;
};

constexpr uint64_t k_hash_base = 1000003ULL;

uint64_t window_hash(const llama_token * t, int32_t n) {
    uint64_t h = 0;
    for (int32_t i = 0; i < n; ++i) {
        h = h * k_hash_base + (uint64_t) (uint32_t) t[i] + 1;
    }
    return h;
}

// the runs of at least n_min tokens of seq[from, n_max) that held[from, ...) has, in the same order
// in both: scanning seq, each position looks for the nearest window of n_min tokens in held after
// the previous run that equals seq's window there; a found run extends as far as the two agree
std::vector<run> find_runs(const std::vector<llama_token> & held, const std::vector<llama_token> & seq,
                           int32_t from, int32_t n_max, int32_t n_min) {
    std::vector<run> out;
    const int32_t    n_held = (int32_t) held.size();
    if (n_held - from < n_min || n_max - from < n_min) {
        return out;
    }
    uint64_t top = 1;  // k_hash_base^n_min, which takes the leaving token out of a rolling hash
    for (int32_t i = 0; i < n_min; ++i) {
        top *= k_hash_base;
    }
    // every window of held after from, by hash, positions ascending
    std::unordered_map<uint64_t, std::vector<int32_t>> at;
    uint64_t h = window_hash(held.data() + from, n_min);
    for (int32_t c = from;; ++c) {
        at[h].push_back(c);
        if (c + n_min >= n_held) {
            break;
        }
        h = h * k_hash_base + (uint64_t) (uint32_t) held[c + n_min] + 1 - top * ((uint64_t) (uint32_t) held[c] + 1);
    }
    int32_t  c      = from;
    int32_t  p      = from;
    bool     hashed = false;
    uint64_t hp     = 0;
    while (p + n_min <= n_max && c + n_min <= n_held) {
        if (!hashed) {
            hp     = window_hash(seq.data() + p, n_min);
            hashed = true;
        }
        int32_t found = -1;
        if (auto it = at.find(hp); it != at.end()) {
            for (auto k = std::lower_bound(it->second.begin(), it->second.end(), c); k != it->second.end(); ++k) {
                if (*k + n_min <= n_held && std::equal(seq.begin() + p, seq.begin() + p + n_min, held.begin() + *k)) {
                    found = *k;
                    break;
                }
            }
        }
        if (found < 0) {
            if (p + n_min < n_max) {
                hp = hp * k_hash_base + (uint64_t) (uint32_t) seq[p + n_min] + 1 - top * ((uint64_t) (uint32_t) seq[p] + 1);
            }
            ++p;
            continue;
        }
        int32_t len = n_min;
        while (p + len < n_max && found + len < n_held && held[found + len] == seq[p + len]) {
            ++len;
        }
        out.push_back({found, p, len});
        p += len;
        c      = found + len;
        hashed = false;
    }
    return out;
}

}  // namespace

bool kv_cache::can_reuse() const {
    return spare_seq_ >= 0 && !shared_ && n_forgotten_ == 0;
}

int32_t kv_cache::n_reusable(const std::vector<llama_token> & seq, int32_t n_max, int32_t n_min) const {
    n_max            = std::min<int32_t>(n_max, (int32_t) seq.size());
    const int32_t n0 = common_prefix(seq, n_max);
    if (!can_reuse() || n_min < 1) {
        return n0 < n_forgotten_ ? 0 : n0;
    }
    int32_t n = n0;
    for (const run & u : find_runs(tokens_, seq, n0, n_max, n_min)) {
        n += u.len;
    }
    return n;
}

kv_cache::reuse_result kv_cache::keep_reusable(const std::vector<llama_token> & seq, int32_t n_max, int32_t n_min,
                                               const std::function<void()> & between_chunks) {
    if (n_min < 1) {
        throw std::invalid_argument("keep_reusable needs runs of at least 1 token, got " + std::to_string(n_min));
    }
    reuse_result r;
    n_max = std::min<int32_t>(n_max, (int32_t) seq.size());
    if (!can_reuse()) {
        r.n_kept = keep_common_prefix(seq, n_max);
        return r;
    }
    const int32_t          n0   = common_prefix(seq, n_max);
    const std::vector<run> runs = find_runs(tokens_, seq, n0, n_max, n_min);
    if (runs.empty()) {
        r.n_kept = keep_common_prefix(seq, n_max);
        return r;
    }
    llama_memory_t mem = llama_get_memory(ctx_.get());
    // the runs wait in the spare sequence, unmoved, while this one drops all after the common prefix
    for (const run & u : runs) {
        llama_memory_seq_cp(mem, 0, spare_seq_, u.src, u.src + u.len);
    }
    llama_memory_seq_rm(mem, 0, n0, -1);
    tokens_.resize(n0);
    const llama_pos away = 2 * (llama_pos) n_ctx_;  // past every position either sequence holds
    try {
        for (const run & u : runs) {
            // the tokens before the run: decoded at their positions, after what is held
            const int32_t n_gap = u.dst - n_past();
            decode(seq.data() + n_past(), n_gap, false, nullptr, between_chunks);
            r.n_decoded += n_gap;
            // the run back into this sequence at its new positions. The moves add up in each cell and
            // llama.cpp turns its keys once, by the sum, at the next decode; the detour past every
            // held position keeps each move's range clear of cells that another move put there
            llama_memory_seq_add(mem, spare_seq_, u.src, u.src + u.len, away + u.dst - u.src);
            llama_memory_seq_cp(mem, spare_seq_, 0, away + u.dst, away + u.dst + u.len);
            llama_memory_seq_rm(mem, spare_seq_, away + u.dst, away + u.dst + u.len);
            llama_memory_seq_add(mem, 0, away + u.dst, away + u.dst + u.len, -away);
            tokens_.insert(tokens_.end(), seq.begin() + u.dst, seq.begin() + u.dst + u.len);
            r.n_shifted += u.len;
        }
    } catch (...) {
        llama_memory_seq_rm(mem, spare_seq_, -1, -1);
        llama_memory_seq_rm(mem, 0, n_past(), -1);
        throw;
    }
    r.n_kept = n_past();
    return r;
}

}  // namespace specllama
