// pymtp: the one vocabulary of the engine's options (native/include/llama-mtp.h). Python's
// pymtp/options.py mirrors it (tests/test_options.py checks the two agree); llama-server's flags
// and request fields validate with it.

#include "llama-mtp.h"

#include <cstring>
#include <string>

namespace {

struct named {
    int32_t      value;
    const char * name;
};

// draft modes in the order users see them: "auto" first (the default)
constexpr named draft_modes[] = {
    { LLAMA_MTP_DRAFT_AUTO, "auto" },
    { LLAMA_MTP_DRAFT_GREEDY, "greedy" },
    { LLAMA_MTP_DRAFT_CHAIN, "chain" },
    { LLAMA_MTP_DRAFT_STOCHASTIC, "stochastic" },
};

constexpr named head_policies[] = {
    { LLAMA_MTP_HEADS_PER_LAYER, "per_layer" },
    { LLAMA_MTP_HEADS_FIRST, "first" },
    { LLAMA_MTP_HEADS_CAPPED, "capped" },
};

template <size_t N>
const char * name_of(const named (&table)[N], int32_t value) {
    for (const auto & e : table) {
        if (e.value == value) {
            return e.name;
        }
    }
    return nullptr;
}

template <size_t N>
int32_t value_of(const named (&table)[N], const char * name) {
    for (const auto & e : table) {
        if (name != nullptr && std::strcmp(e.name, name) == 0) {
            return e.value;
        }
    }
    return LLAMA_MTP_ERR_ARG;
}

template <size_t N>
std::string choices_of(const named (&table)[N]) {
    std::string s;
    for (const auto & e : table) {
        s += (s.empty() ? "" : ", ") + std::string(e.name);
    }
    return s;
}

} // namespace

int32_t llama_mtp_draft_limit(void) {
    return LLAMA_MTP_MAX_DRAFT;
}

const char * llama_mtp_draft_mode_name(int32_t mode) {
    return name_of(draft_modes, mode);
}

int32_t llama_mtp_draft_mode_from_name(const char * name) {
    return value_of(draft_modes, name);
}

const char * llama_mtp_draft_choices(void) {
    static const std::string s = choices_of(draft_modes);
    return s.c_str();
}

llama_mtp_draft_mode llama_mtp_draft_mode_auto(float temperature, bool penalties) {
    if (temperature > 0.0f) {
        return LLAMA_MTP_DRAFT_STOCHASTIC;
    }
    return penalties ? LLAMA_MTP_DRAFT_CHAIN : LLAMA_MTP_DRAFT_GREEDY;
}

const char * llama_mtp_head_policy_name(int32_t policy) {
    return name_of(head_policies, policy);
}

int32_t llama_mtp_head_policy_from_name(const char * name) {
    return value_of(head_policies, name);
}

const char * llama_mtp_head_policy_choices(void) {
    static const std::string s = choices_of(head_policies);
    return s.c_str();
}
