// The d2t check of the Windows cross-build (installers/windows_cross.py): built with MinGW against the PATCHED
// llama.cpp and run under Wine, it does what the app's self-test does through ctypes (app/native/draft_probe.py):
// the target evaluates a prompt with its nextn hidden rows kept, then the d2t sidecar, loaded as an MTP-only
// model and bound to the target as an MTP draft context, evaluates the same tokens with those rows shifted right
// by one. The patched graph scatters the sidecar's trimmed LM head through d2t into a full-vocabulary row of
// -inf, so each draft row must be finite exactly at the d2t ids.
//
//   d2t_check.exe TARGET.gguf SIDECAR-D2T.gguf LOGITS-OUT.bin TOKEN...
//
// Prints one JSON line (the target's and the draft's greedy ids per position, the finite count per draft row)
// and writes the draft logits (positions x vocabulary, float32, little-endian) to LOGITS-OUT.bin; Python compares
// both with d2t and with the Linux engine. C++ only because llama-ext.h (the MTP staging calls) is C++.
#include "llama.h"
#include "llama-ext.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static int fail(const std::string & why) {
    std::printf("{\"ok\": false, \"error\": \"%s\"}\n", why.c_str());
    std::fflush(stdout);
    return 2;
}

static void quiet(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) {
        std::fputs(text, stderr);
    }
}

static int argmax(const float * row, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i) {
        if (row[i] > row[best]) {
            best = i;
        }
    }
    return best;
}

static std::string ints(const std::vector<int> & values) {
    std::string out = "[";
    for (size_t i = 0; i < values.size(); ++i) {
        out += (i ? ", " : "") + std::to_string(values[i]);
    }
    return out + "]";
}

int main(int argc, char ** argv) {
    if (argc < 5) {
        return fail("usage: d2t_check TARGET SIDECAR LOGITS-OUT TOKEN...");
    }
    std::vector<llama_token> tokens;
    for (int i = 4; i < argc; ++i) {
        tokens.push_back((llama_token) std::atoi(argv[i]));
    }
    const int n = (int) tokens.size();
    llama_log_set(quiet, nullptr);
    llama_backend_init();

    llama_model_params tparams = llama_model_default_params();
    tparams.n_gpu_layers = 0;
    tparams.load_mtp = false;
    llama_model * target = llama_model_load_from_file(argv[1], tparams);
    if (!target) {
        return fail(std::string("could not load the target ") + argv[1]);
    }
    llama_model_params sparams = llama_model_default_params();
    sparams.n_gpu_layers = 0;
    sparams.load_mtp = true;  // the sidecar is an MTP-only model: this is where the patch reads d2t
    llama_model * sidecar = llama_model_load_from_file(argv[2], sparams);
    if (!sidecar) {
        return fail(std::string("could not load the d2t sidecar ") + argv[2]);
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(target));
    const int n_embd = llama_model_n_embd(target);

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = n + 8;
    cparams.n_batch = n;
    cparams.n_ubatch = n;
    cparams.n_threads = 2;
    cparams.n_threads_batch = 2;
    llama_context * tctx = llama_init_from_model(target, cparams);
    if (!tctx) {
        return fail("could not create the target context");
    }
    llama_set_embeddings_nextn(tctx, true, false);

    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; ++i) {
        batch.token[i] = tokens[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(tctx, batch) != 0) {
        return fail("the target's llama_decode failed");
    }
    std::vector<int> target_next(n);
    for (int i = 0; i < n; ++i) {
        target_next[i] = argmax(llama_get_logits_ith(tctx, i), n_vocab);
    }
    // the draft head's input at position i is the target's nextn row of position i - 1 (row 0: zeros)
    const float * hidden = llama_get_embeddings_nextn(tctx);
    if (!hidden) {
        return fail("the target gave no nextn hidden rows");
    }
    std::vector<float> shifted((size_t) n * n_embd, 0.0f);
    std::memcpy(shifted.data() + n_embd, hidden, sizeof(float) * (size_t) (n - 1) * n_embd);

    llama_context_params dparams = cparams;
    dparams.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    dparams.ctx_other = tctx;
    llama_context * dctx = llama_init_from_model(sidecar, dparams);
    if (!dctx) {
        return fail("could not create the MTP draft context for the sidecar");
    }
    llama_set_embeddings_nextn(dctx, true, true);
    batch.embd = shifted.data();  // ours: detached again before llama_batch_free
    if (llama_decode(dctx, batch) != 0) {
        return fail("the draft context's llama_decode failed");
    }
    batch.embd = nullptr;

    std::vector<int> draft_next(n), finite(n);
    FILE * out = std::fopen(argv[3], "wb");
    if (!out) {
        return fail(std::string("could not write ") + argv[3]);
    }
    for (int i = 0; i < n; ++i) {
        const float * row = llama_get_logits_ith(dctx, i);
        draft_next[i] = argmax(row, n_vocab);
        int count = 0;
        for (int v = 0; v < n_vocab; ++v) {
            count += std::isfinite(row[v]) ? 1 : 0;
        }
        finite[i] = count;
        std::fwrite(row, sizeof(float), (size_t) n_vocab, out);
    }
    std::fclose(out);

    std::printf("{\"ok\": true, \"n_vocab\": %d, \"n_embd\": %d, \"target_next\": %s, \"draft_next\": %s, "
                "\"finite_per_row\": %s, \"system_info\": \"%s\"}\n",
                n_vocab, n_embd, ints(target_next).c_str(), ints(draft_next).c_str(), ints(finite).c_str(),
                llama_print_system_info());
    std::fflush(stdout);

    llama_batch_free(batch);
    llama_free(dctx);
    llama_free(tctx);
    llama_model_free(sidecar);
    llama_model_free(target);
    llama_backend_free();
    return 0;
}
