// pymtp: the adaptive draft controller (native/engine/mtp-adaptive*.cpp, the real one, linked in) driven
// through a simulated machine, step by step in the order llama_mtp_step calls it, next to every fixed
// draft length on the same machine. Time is simulated, so a run is exact and repeatable: it shows what
// the controller chooses where measuring on the device is slow and noisy (an H100 27B run costs minutes
// of device time and its per-decode timings carry the previous step's unfinished GPU work).
//
// The machine (all times in ms, per step of one sequence):
//   T(n)       a target decode of n tokens plus sampling its rows: plain_ms * V(n) + sample_ms * n
//   S          a target decode whose size differs from the previous one costs S more (a GPU backend
//              rebuilds its graph: the 27B shape on the H100 measured 4-6 ms before patch 0011 kept one
//              CUDA graph per shape, ~0.4 ms since)
//   new_size   the first decode of each size costs new_size_ms more (a graph built and captured: the 27B
//              shape, a first 5-token verify 28 ms against 22 ms warm); so does each catch-up size
//   gpu        1 (default): the machine is a GPU, as the engine tells the controller (`graphs`); 0: a CPU
//   capture    the first decode of a size right after one of the same size (its first repeat) costs
//              capture_ms more (ggml-cuda captures the size's CUDA graph then: the 27B shape on the H100,
//              a 4-token verify 35.6 ms there against 19-21 ms warm; SmolLM2, 4.7 against ~1.6)
//   recapture  each 256-cell step of the KV window (window) and each new generation change every graph's
//              properties: each size's next decode, the draft's and each catch-up size's, costs recapture_ms
//              more (patch 0018 re-captures at once)
//   D          one draft decode
//   par        > 1: a parallel head (pymtp graft --parallel K): one draft decode drafts min(k, par) tokens, its
//              rows costing D + par_row_ms x (rows - 1) (H200, the built-in model: 1-4 rows 0.205-0.381 of a
//              plain step); each pass size builds and captures its own graphs (new_size_ms, capture_ms)
//   W          the MTP catch-up after a step, per written row; async_share of it runs on the device after
//              the step returned and lands in the next timed part (the next draft, or the next target decode)
//   O          the caller's time between steps
//   hidden_ms  what outputting the hidden state adds to a target decode while the MTP side is awake
//   wake_target  the first wake_target_n target decodes after the start and after waking cost wake_target_ms more
//   cold_ms    what each of the first cold_n draft decodes costs more (new graphs: at the start, after waking),
//              and each of the first cold_n catch-up decodes
//   prompt     tokens per generation (0: one generation): each starts after a prefill (the next decode is a
//              change of size, and prefill_ms of the prompt's MTP catch-up lands in the next timed part),
//              its first token comes from the prefill's logits, and a step drafts at most the tokens left
//              less one (as llama_mtp_step caps k by n_out_max), so a generation ends in short drafts
// Acceptance: synthetic per-position rates (unconditional, as `pymtp bench --synthetic-rates`); with
// acc_spread > 0 the text varies: every acc_seg steps the conditional rates are scaled by a new factor
// drawn from [1 - acc_spread, 1 + acc_spread] (a real head's probes land on easier or harder text); with
// ctx_loss > 0 a draft accepts less where the MTP KV holds few rows (after waking: it restarts empty); with
// hard_tokens > 0 a stretch of that many tokens from token hard_at on is hard text (rates x hard_factor); with
// open_tokens > 0 (and prompt > 0) every answer's first open_tokens tokens accept at rates x open_factor.
// Timings get multiplicative noise (jitter) from a seeded generator, and a share spike_p of target decodes
// stalls spike_ms more.
//
// Usage: controller_sim key=value ...  (see main() for the keys); prints one JSON object. trace=FILE
// writes the controller's run one step per line, as PYMTP_ADAPTIVE_TRACE does in the engine.

#include "mtp-adaptive.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

struct machine {
    double              plain_ms    = 12.7;
    std::vector<double> v           = { 1.0, 1.08, 1.22, 1.44, 1.55, 1.74, 1.92, 2.09, 2.2 }; // V(1..9)
    double              sample_ms   = 0.3;
    double              switch_ms   = 5.0;
    double              back_ms     = -1.0; // a change to a plain step costs this instead (< 0: switch_ms): a GPU
                                            //   replays the plain step's captured graph (SmolLM2, H200: ~1 ms)
    double              draft_ms    = 1.0;
    int32_t             par         = 0;    // > 1: a parallel head drafting up to par tokens in one decode
    double              par_row_ms  = 0.0;  //   each row of its pass past the first costs this much more
    double              row_ms      = 0.25;
    double              catchup_ms  = 0.5; // per catch-up decode, on top of its rows
    double              async_share = 0.8;
    double              caller_ms   = 0.1;
    double              hidden_ms   = 0.2;
    double              jitter      = 0.03;
    double              spike_p     = 0.0; // a share of target decodes that stall (the H100 trace at T=0.7: 0.8% of
    double              spike_ms    = 0.0; //   plain decodes took 2x-15x their median, 2.5 ms more on average)
    std::vector<double> rates       = { 0.917, 0.837, 0.648, 0.538, 0.451, 0.348 };
    float               conf        = -1.0f; // the head's confidence reported with each draft (< 0: none)
    double              cold_ms     = 24.0;  // the first draft decodes of a new MTP context (and after waking)
    int32_t             cold_n      = 2;     //   cost this much more each (graphs built; H100 27B: 25 ms vs 1)
    int64_t             prompt      = 0;     // tokens per generation (0: one generation of all the tokens)
    double              prefill_ms  = 4.0;   // the prompt's MTP catch-up, landing in the next timed part
    double              new_size_ms = 0.0;   // the first decode of each size (graph built)
    double              acc_spread  = 0.0;   // text varies: each segment of acc_seg steps scales the rates
    int64_t             acc_seg     = 64;    //   by a factor drawn from [1 - acc_spread, 1 + acc_spread]
    int64_t             hard_at     = 0;     // tokens hard_at .. hard_at + hard_tokens - 1 of a run are hard
    int64_t             hard_tokens = 0;     //   text: the rates scaled by hard_factor (on top of acc_spread)
    double              hard_factor = 1.0;
    int64_t             open_tokens = 0;     // the first open_tokens tokens of every generation (prompt > 0)
    double              open_factor = 1.0;   //   accept at rates x open_factor (an answer's opening: this CPU,
                                             //   fixed k=1, first 48 tokens 0.54 against 0.67 after at T=0)
    double              wake_target_ms = 0.0; // the first wake_target_n target decodes at the start and after waking
    int32_t             wake_target_n  = 8;   //   cost this much more (the hidden-state output's graphs: H100, 2-4 ms)
    double              ctx_loss    = 0.0;   // acceptance x (1 - ctx_loss exp(-rows / ctx_tau)), rows: the MTP
    double              ctx_tau     = 45.0;  //   rows since its KV restarted (CPU, SmolLM2 v2 head: 0.24, 45)
    double              capture_ms  = 0.0;   // the first repeat of each size (CUDA graph captured)
    // every graph's properties change when the KV window grows past a step of `window` cells and when a new
    // generation starts with a short one: each size's (and the draft's and each catch-up size's) next decode
    // re-captures its CUDA graph, recapture_ms more (patch 0018: one slow call per change; H200, SmolLM2:
    // ~2-3 ms against 1.3-1.6 warm). A length run once in a while pays it again and again.
    double              recapture_ms = 0.0;
    int64_t             window       = 256;
    int64_t             prompt_rows  = 64;   // prompt tokens before a generation's first token (the KV window)
    int32_t             gpu         = 1;     // a GPU (the controller is told so, as the engine tells it)
    // load > 1: the simulated sequence decodes among load - 1 others that never draft (llama-server's slots):
    // plain_ms and V(n) are the whole batch's decode with this sequence's n rows in it, its draft decodes
    // hold up the batch, the controller learns as llama-server reports (llama_mtp_report_decode: the batch's
    // time; no whole steps timed), and a run's rate counts every sequence's tokens
    int32_t             load        = 1;
    int32_t             cutoff      = 1; // 0: the controller's cutoff off (PYMTP_ADAPTIVE_NO_CUTOFF=1)
    // load > 1: the controller is told that the context splits uneven batches (a KV stream per sequence,
    // llama-server without --kv-unified; mtp-adaptive-cost.h, split_floor), as the engine tells it. 0: as
    // PYMTP_ADAPTIVE_ALONE=1 (V(n) holds what the split costs either way)
    int32_t             splits      = 1;
    // > 0: the draft decode's cost as the other slots timed it (llama_mtp_share_costs), known from the start
    double              shared_draft_ms = 0.0;
    // 1: the controller starts primed with this machine's costs, as the engine's warm-up times them at load on a
    // GPU (mtp-warmup.cpp, time_warm_sizes); 0: unprimed (the engine has no switch for this alone:
    // PYMTP_ADAPTIVE_START=0 turns priming off with the other start rules)
    int32_t             prime           = 1;
    int32_t             began           = 1; // 1: the controller is told when a generation starts (controller::began)
    int32_t             start           = 1; // 0: the controller's start rules off (PYMTP_ADAPTIVE_START=0)

    double V(int32_t n) const {
        if (n <= (int32_t) v.size()) {
            return v[n - 1];
        }
        const double slope = v.size() >= 2 ? v.back() - v[v.size() - 2] : 0.2;
        return v.back() + slope * (n - (int32_t) v.size());
    }
    // P(draft i accepted | the drafts before it were)
    double cond(int32_t i) const {
        if (rates.empty()) {
            return 0.0;
        }
        auto at = [&](int32_t j) -> double {
            if (j < (int32_t) rates.size()) {
                return rates[j];
            }
            const double last = rates.back();
            const double ratio =
                rates.size() >= 2 && rates[rates.size() - 2] > 0 ? last / rates[rates.size() - 2] : last;
            return last * std::pow(ratio, j - (int32_t) rates.size() + 1);
        };
        const double prev = i == 0 ? 1.0 : at(i - 1);
        return prev > 0.0 ? std::min(1.0, at(i) / prev) : 0.0;
    }
};

struct result {
    double  tokens                        = 0.0;
    double  others                        = 0.0; // the other sequences' tokens (load > 1)
    double  ms                            = 0.0;
    int64_t steps                         = 0;
    int64_t drafted                       = 0;
    int64_t accepted                      = 0;
    int64_t hist[LLAMA_MTP_MAX_DRAFT + 1] = {};
};

class sim {
  public:
    sim(const machine & m, uint32_t seed) : m(m), rng(seed) {}

    // fixed_k < 0: the controller (k_max = cap); otherwise every step drafts fixed_k (controller off)
    result run(int32_t fixed_k, int32_t cap, int64_t n_tokens, bool plain_only) {
        mtp::controller c;
        if (m.par > 1) {
            cap = std::min(cap, m.par); // one decode, at most par drafts a step (as the engine caps k_max)
        }
        c.k_max  = fixed_k < 0 ? cap : 0;
        c.graphs = m.gpu != 0;
        c.par    = m.par > 1 ? m.par : 0;
        c.cutoff = m.cutoff != 0;
        c.splits = m.load > 1 && m.splits != 0;
        if (m.shared_draft_ms > 0.0) {
            c.draft_group    = std::make_shared<mtp::controller::draft_costs>();
            c.draft_group->d = mtp::running_mean{ m.shared_draft_ms, 10 };
        }
        c.start_rules = m.start != 0;
        if (m.prime && m.start && m.gpu && fixed_k < 0) { // the engine's warm-up timings at load (controller::prime)
            std::vector<double> t;
            for (int32_t n = 1; n <= cap + 1; ++n) {
                t.push_back(m.plain_ms * m.V(n) + m.sample_ms * n + m.hidden_ms);
            }
            c.prime(t.data(), (int32_t) t.size(), m.draft_ms, m.switch_ms);
        }
        c.trace = fixed_k < 0 ? trace : nullptr; // the controller's run only
        result r;
        cold_left = m.cold_n;
        catchup_cold_left = m.cold_n;
        tcold_left        = m.wake_target_n;
        catchup_sizes_seen.clear();
        sizes_seen.clear();
        sizes_repeated.clear();
        pass_sizes_seen.clear();
        pass_sizes_repeated.clear();
        prev_pass = 0;
        warm_sizes.clear();
        warm_catchups.clear();
        warm_draft = false;
        kv         = m.prompt_rows;
        seg_left   = 0;
        mtp_ctx    = m.prompt > 0 ? 0 : INT64_MAX / 2; // one generation: its context is all there
        acc_factor = 1.0;
        int64_t left = 0; // tokens left in the current generation
        while (r.tokens < n_tokens) {
            if (m.prompt > 0 && left <= 0) { // a new generation: prefill, its first token from the prefill's logits
                left   = m.prompt - 1;
                mtp_ctx = m.prompt; // the prompt's MTP rows are caught up (a new generation)
                warm_sizes.clear();
                warm_catchups.clear();
                warm_draft = false;
                kv         = m.prompt_rows;
                prev_n = 0;
                if (!plain_only && mtp_on(fixed_k) && !c.asleep) { // asleep, the engine writes no MTP rows
                    pending += m.prefill_ms;
                }
                if (m.began) {
                    c.began(); // as the engine tells it (llama_mtp_prefill; a caller's position going back)
                }
                r.tokens += 1;
                continue;
            }
            const double gap     = noisy(m.caller_ms);
            double       step_ms = 0.0, parts = 0.0;
            int32_t      k = plain_only ? 0 : fixed_k < 0 ? cap : fixed_k;
            if (m.prompt > 0) {
                k = std::min<int64_t>(k, left - 1);
            }
            if (!plain_only && c.on()) {
                c.load = m.load;
                if (c.asleep) {
                    k = 0;
                    if (c.asleep_step()) { // wake
                        cold_left         = m.cold_n;
                        catchup_cold_left = m.cold_n;
                        tcold_left        = m.wake_target_n;
                        c.woke();
                        mtp_ctx = 0; // the MTP KV restarts empty
                    }
                } else {
                    k = c.plan(k);
                    if (c.sleeps_now(k)) {
                        queue = 0; // the queue and the MTP KV are dropped
                        c.fell_asleep();
                    }
                }
            }
            if (k > 0 && queue > 0) { // flush_deferred
                const double w = write_rows(queue);
                step_ms += w;
                parts += w;
                queue = 0;
            }
            // drafting: a sequential head decodes once per draft, a parallel one once for min(k, par) drafts
            const int32_t rows = m.par > 1 ? std::min(k, m.par) : 0;
            int32_t       kd   = 0;
            for (int32_t i = 0; i < (m.par > 1 ? rows : k); ++i) {
                if (i == 0 || rows == 0) {
                    const double t = draft_decode(rows);
                    step_ms += t;
                    parts += t;
                    c.timed_draft(t, rows);
                }
                bool more = true;
                if (!c.keep(i, m.conf, &more)) {
                    break;
                }
                kd++;
                if (!more) {
                    break;
                }
            }
            c.drafted(kd);
            // verify
            const int32_t n = kd + 1;
            const double  change = n == 1 && m.back_ms >= 0.0 ? m.back_ms : m.switch_ms;
            double        t = noisy(m.plain_ms * m.V(n) + m.sample_ms * n) + spike() + (n != prev_n ? change : 0.0) +
                              (sizes_seen.insert(n).second ? m.new_size_ms : 0.0) +
                              (n == prev_n && sizes_repeated.insert(n).second ? m.capture_ms : 0.0) +
                              (c.asleep || plain_only || !mtp_on(fixed_k) ? 0.0 : m.hidden_ms) + take_pending() +
                              (warm_sizes.insert(n).second ? m.recapture_ms : 0.0);
            if (tcold_left > 0 && !plain_only && mtp_on(fixed_k)) { // a target graph new since the start or waking
                tcold_left--;
                t += m.wake_target_ms;
            }
            prev_n          = n;
            int32_t n_acc   = 0;
            if (m.acc_spread > 0.0 && (seg_left -= 1) <= 0) { // text that drafts better or worse for a while
                seg_left   = m.acc_seg;
                acc_factor = 1.0 + m.acc_spread * (2.0 * u(rng) - 1.0);
            }
            // a draft attends over the MTP rows written since the MTP KV restarted (waking; a new generation
            // starts with its prompt's): fewer of them accept less (ctx_loss, ctx_tau)
            const double ctx_factor = 1.0 - m.ctx_loss * std::exp(-(double) mtp_ctx / std::max(1.0, m.ctx_tau));
            double       hard = r.tokens >= m.hard_at && r.tokens < m.hard_at + m.hard_tokens ? m.hard_factor : 1.0;
            if (m.prompt > 0 && m.prompt - 1 - left < m.open_tokens) { // an answer's opening accepts less
                hard *= m.open_factor;
            }
            while (n_acc < kd && u(rng) < std::min(0.99, hard * ctx_factor * acc_factor * m.cond(n_acc))) {
                n_acc++;
            }
            const int32_t n_out = n_acc + 1;
            left -= n_out;
            if (m.recapture_ms > 0.0 && (kv + n_out) / m.window != kv / m.window) { // the KV window grew a step
                warm_sizes.clear();
                warm_catchups.clear();
                warm_draft = false;
            }
            kv += n_out;
            if (!c.asleep) {
                mtp_ctx += n_out;
            }
            c.verified(kd, n_acc);
            if (m.load > 1) {
                c.timed_batch(n, m.load, m.load - 1 + n, t);
            } else {
                c.timed_target(n, 1, t);
            }
            step_ms += t;
            parts += t;
            // catch-up
            if (!c.asleep && !plain_only && mtp_on(fixed_k)) {
                queue += n_out;
                if (c.defer_catchup() && queue < mtp::controller::QUEUE) {
                    c.n_deferred += n_out;
                } else {
                    const int32_t rows = queue;
                    double        w    = write_rows(queue);
                    queue              = 0;
                    if (catchup_cold_left > 0) { // new graphs of the MTP context, as its first drafts
                        catchup_cold_left--;
                        w += m.cold_ms;
                    }
                    if (catchup_sizes_seen.insert(rows).second) { // a catch-up of a new size: its graph built
                        w += m.new_size_ms;
                    }
                    if (warm_catchups.insert(rows).second) {
                        w += m.recapture_ms;
                    }
                    step_ms += w;
                    parts += w;
                    if (n_out > 1) {
                        c.timed_catchup(rows, w);
                    }
                }
            }
            c.timed_overhead(gap + std::max(0.0, step_ms - parts));
            if (!c.asleep && m.load <= 1) {
                c.stepped(n_out, gap + step_ms);
            }
            c.trace_step(k, kd, n_out, 0.0, t, 0.0, gap, step_ms);
            r.ms += gap + step_ms;
            r.tokens += n_out;
            r.others += m.load - 1;
            r.steps++;
            r.drafted += kd;
            r.accepted += n_acc;
            r.hist[std::min(kd, (int32_t) LLAMA_MTP_MAX_DRAFT)]++;
        }
        r.ms += take_pending();
        last = c;
        return r;
    }

    mtp::controller last;
    std::FILE *     trace = nullptr; // the controller's run: one line per step (trace=FILE)

  private:
    static bool mtp_on(int32_t fixed_k) { return fixed_k != 0; }

    double noisy(double ms) { return ms * (1.0 + m.jitter * (2.0 * u(rng) - 1.0)); }

    // a target decode that stalls now and then (spike_p of them, spike_ms more)
    double spike() { return m.spike_p > 0.0 && u(rng) < m.spike_p ? m.spike_ms : 0.0; }

    // a draft decode's time; rows > 0: a parallel head's pass of rows (each size builds and captures its graphs)
    double draft_decode(int32_t rows) {
        double t = noisy(m.draft_ms + m.par_row_ms * std::max(0, rows - 1)) + take_pending() +
                   (warm_draft ? 0.0 : m.recapture_ms);
        if (rows > 0) {
            t += (pass_sizes_seen.insert(rows).second ? m.new_size_ms : 0.0) +
                 (rows == prev_pass && pass_sizes_repeated.insert(rows).second ? m.capture_ms : 0.0);
            prev_pass = rows;
        }
        warm_draft = true;
        if (cold_left > 0) { // new graphs (the first drafts, and after waking)
            cold_left--;
            t += m.cold_ms;
        }
        return t;
    }

    // a catch-up decode of n rows: the host part now, the rest lands in the next timed part
    double write_rows(int32_t n) {
        const double w = noisy(m.catchup_ms + m.row_ms * n);
        pending += m.async_share * w;
        return (1.0 - m.async_share) * w;
    }

    double take_pending() {
        const double p = pending;
        pending        = 0.0;
        return p;
    }

    const machine &                        m;
    std::mt19937                           rng;
    std::uniform_real_distribution<double> u{ 0.0, 1.0 };
    double                                 pending   = 0.0;
    int32_t                                queue     = 0;
    int32_t                                prev_n    = 1;
    int32_t                                cold_left = 0;
    int64_t                                mtp_ctx    = 0;   // MTP rows since the MTP KV restarted
    int64_t                                seg_left   = 0;   // steps left in the current text segment
    double                                 acc_factor = 1.0; // its acceptance factor (acc_spread)
    int32_t                                catchup_cold_left = 0; // the same for catch-up decodes
    int32_t                                tcold_left        = 0; // target decodes left to cost wake_target_ms
    std::set<int32_t>                      catchup_sizes_seen;    // catch-up decode sizes met (new_size_ms)
    std::set<int32_t>                      sizes_seen;   // target decode sizes met so far (new_size_ms)
    std::set<int32_t>                      sizes_repeated; // sizes decoded twice in a row so far (capture_ms)
    std::set<int32_t>                      warm_sizes;     // target sizes whose graph matches the window (recapture_ms)
    std::set<int32_t>                      warm_catchups;  // the same for catch-up sizes
    bool                                   warm_draft = false; // the draft's graph matches the window
    std::set<int32_t>                      pass_sizes_seen;     // a parallel head's pass sizes met (new_size_ms)
    std::set<int32_t>                      pass_sizes_repeated; // ... and decoded twice in a row (capture_ms)
    int32_t                                prev_pass = 0;
    int64_t                                kv = 0;             // the current generation's KV cells
};

std::vector<double> parse_list(const char * s) {
    std::vector<double> out;
    for (const char * p = s; *p;) {
        char * end = nullptr;
        out.push_back(std::strtod(p, &end));
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p) {
            break;
        }
    }
    return out;
}

void print_result(const char * name, const result & r, double plain_rate, bool comma) {
    std::printf("    \"%s\": {\"tok_per_ms\": %.6f, \"speedup\": %.4f, \"tokens_per_step\": %.4f, \"steps_per_k\": [",
                name, (r.tokens + r.others) / r.ms, (r.tokens + r.others) / r.ms / plain_rate,
                r.tokens / std::max<int64_t>(1, r.steps));
    int32_t last = 0;
    for (int32_t k = 0; k <= LLAMA_MTP_MAX_DRAFT; ++k) {
        if (r.hist[k]) {
            last = k;
        }
    }
    for (int32_t k = 0; k <= std::max(last, 8); ++k) {
        std::printf("%s%lld", k ? ", " : "", (long long) r.hist[k]);
    }
    std::printf("]}%s\n", comma ? "," : "");
}

} // namespace

int main(int argc, char ** argv) {
    machine     m;
    int64_t     n_tokens = 1024;
    int32_t     cap      = 7; // auto drafts 0..cap (the engine's default: llama_mtp_adaptive_default_max)
    int32_t     max_k    = 8;
    uint32_t    seed     = 1;
    std::string trace;
    for (int i = 1; i < argc; ++i) {
        const char * eq = std::strchr(argv[i], '=');
        if (eq == nullptr) {
            std::fprintf(stderr, "controller_sim: expected key=value, got '%s'\n", argv[i]);
            return 2;
        }
        const std::string                                                key(argv[i], eq - argv[i]);
        const char *                                                     val    = eq + 1;
        // one setter per key: the machine's costs (ms), its lists, and the run's own settings
        const std::pair<const char *, std::function<void(const char *)>> keys[] = {
            { "plain_ms", [&](const char * x) { m.plain_ms       = std::atof(x); } },
            { "v", [&](const char * x) { m.v                     = parse_list(x); } },
            { "sample_ms", [&](const char * x) { m.sample_ms     = std::atof(x); } },
            { "switch_ms", [&](const char * x) { m.switch_ms     = std::atof(x); } },
            { "back_ms", [&](const char * x) { m.back_ms         = std::atof(x); } },
            { "draft_ms", [&](const char * x) { m.draft_ms       = std::atof(x); } },
            { "row_ms", [&](const char * x) { m.row_ms           = std::atof(x); } },
            { "par", [&](const char * x) { m.par                 = std::atoi(x); } },
            { "par_row_ms", [&](const char * x) { m.par_row_ms   = std::atof(x); } },
            { "catchup_ms", [&](const char * x) { m.catchup_ms   = std::atof(x); } },
            { "async_share", [&](const char * x) { m.async_share = std::atof(x); } },
            { "caller_ms", [&](const char * x) { m.caller_ms     = std::atof(x); } },
            { "hidden_ms", [&](const char * x) { m.hidden_ms     = std::atof(x); } },
            { "jitter", [&](const char * x) { m.jitter           = std::atof(x); } },
            { "spike_p", [&](const char * x) { m.spike_p         = std::atof(x); } },
            { "spike_ms", [&](const char * x) { m.spike_ms       = std::atof(x); } },
            { "acc_spread", [&](const char * x) { m.acc_spread   = std::atof(x); } },
            { "acc_seg", [&](const char * x) { m.acc_seg         = std::atoll(x); } },
            { "hard_at", [&](const char * x) { m.hard_at         = std::atoll(x); } },
            { "hard_tokens", [&](const char * x) { m.hard_tokens = std::atoll(x); } },
            { "hard_factor", [&](const char * x) { m.hard_factor = std::atof(x); } },
            { "open_tokens", [&](const char * x) { m.open_tokens = std::atoll(x); } },
            { "open_factor", [&](const char * x) { m.open_factor = std::atof(x); } },
            { "ctx_loss", [&](const char * x) { m.ctx_loss       = std::atof(x); } },
            { "wake_target_ms", [&](const char * x) { m.wake_target_ms = std::atof(x); } },
            { "wake_target_n", [&](const char * x) { m.wake_target_n = std::atoi(x); } },
            { "ctx_tau", [&](const char * x) { m.ctx_tau         = std::atof(x); } },
            { "rates", [&](const char * x) { m.rates             = parse_list(x); } },
            { "conf", [&](const char * x) { m.conf               = (float) std::atof(x); } },
            { "cold_ms", [&](const char * x) { m.cold_ms         = std::atof(x); } },
            { "cold_n", [&](const char * x) { m.cold_n           = std::atoi(x); } },
            { "prompt", [&](const char * x) { m.prompt           = std::atoll(x); } },
            { "prefill_ms", [&](const char * x) { m.prefill_ms   = std::atof(x); } },
            { "new_size_ms", [&](const char * x) { m.new_size_ms = std::atof(x); } },
            { "capture_ms", [&](const char * x) { m.capture_ms   = std::atof(x); } },
            { "recapture_ms", [&](const char * x) { m.recapture_ms = std::atof(x); } },
            { "window", [&](const char * x) { m.window = std::max<int64_t>(1, std::atoll(x)); } },
            { "prompt_rows", [&](const char * x) { m.prompt_rows = std::atoll(x); } },
            { "gpu", [&](const char * x) { m.gpu                 = std::atoi(x); } },
            { "load", [&](const char * x) { m.load               = std::max(1, std::atoi(x)); } },
            { "cutoff", [&](const char * x) { m.cutoff           = std::atoi(x); } },
            { "prime", [&](const char * x) { m.prime = std::atoi(x); } },
            { "began", [&](const char * x) { m.began = std::atoi(x); } },
            { "start", [&](const char * x) { m.start = std::atoi(x); } },
            { "splits", [&](const char * x) { m.splits           = std::atoi(x); } },
            { "shared_draft_ms", [&](const char * x) { m.shared_draft_ms = std::atof(x); } },
            { "tokens", [&](const char * x) { n_tokens           = std::atoll(x); } },
            { "cap", [&](const char * x) { cap                   = std::atoi(x); } },
            { "max_k", [&](const char * x) { max_k               = std::atoi(x); } },
            { "seed", [&](const char * x) { seed                 = (uint32_t) std::atoi(x); } },
            { "trace", [&](const char * x) { trace               = x; } },
        };
        const auto * k = std::find_if(std::begin(keys), std::end(keys), [&](const auto & e) { return key == e.first; });
        if (k == std::end(keys)) {
            std::fprintf(stderr, "controller_sim: unknown key '%s'\n", key.c_str());
            return 2;
        }
        k->second(val);
    }
    sim s(m, seed);
    if (!trace.empty() && (s.trace = std::fopen(trace.c_str(), "w")) == nullptr) {
        std::fprintf(stderr, "controller_sim: cannot write %s\n", trace.c_str());
        return 2;
    }
    const result plain      = s.run(0, 0, n_tokens, true);
    const double plain_rate = (plain.tokens + plain.others) / plain.ms;
    std::printf("{\n  \"runs\": {\n");
    print_result("off", plain, plain_rate, true);
    for (int32_t k = 1; k <= max_k; ++k) {
        const std::string name = "k=" + std::to_string(k);
        print_result(name.c_str(), s.run(k, k, n_tokens, false), plain_rate, true);
    }
    const result a = s.run(-1, cap, n_tokens, false);
    print_result("auto", a, plain_rate, false);
    const auto & c = s.last;
    std::printf("  },\n  \"auto\": {\"probes\": %lld, \"cut\": %lld, \"extended\": %lld, \"vetoed\": %lld, "
                "\"dormant\": %lld, \"blocks\": %lld, \"blocks_ended\": %lld, \"blocky\": %s, \"est_switch_ms\": %.3f, "
                "\"est_draft_ms\": %.3f, \"est_target_ms\": [",
                (long long) c.n_probes, (long long) c.n_cut, (long long) c.n_extended, (long long) c.n_vetoed,
                (long long) c.n_dormant, (long long) c.n_blocks, (long long) c.n_blocks_ended,
                c.blocky() ? "true" : "false",
                std::max(0.0, c.switching.v), c.draft_cost());
    for (int32_t n = 1; n <= cap + 1; ++n) {
        std::printf("%s%.3f", n > 1 ? ", " : "", c.target_cost(n));
    }
    std::printf("], \"est_pass_ms\": [");   // a parallel head: D of a pass of 1..par rows (pass_cost)
    for (int32_t n = 1; n <= c.par; ++n) {
        std::printf("%s%.3f", n > 1 ? ", " : "", c.pass_cost(n));
    }
    std::printf("], \"block_cost_per_step\": [");
    for (int32_t k = 0; k <= cap; ++k) {
        std::printf("%s%.3f", k > 0 ? ", " : "", c.blk[k].get());
    }
    std::printf("], \"est_tokens\": [");
    for (int32_t k = 0; k <= cap; ++k) {
        std::printf("%s%.3f", k > 0 ? ", " : "", c.tokens(k));
    }
    std::printf("], \"realized_plain\": %.5f, \"realized_draft\": %.5f}\n}\n", c.real_plain.get(), c.real_draft.get());
    return 0;
}
