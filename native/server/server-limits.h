#pragma once

// pymtp: what one request to llama-server may cost. Set by the server flags named beside each field
// (common/arg.cpp), held in common_params::server_limits; checked by native/server/server-requests.cpp.
// A request over a limit gets a 400 that names the limit and its flag. Plain data: common.h includes it.

#include <cstdint>

struct server_limits {
    int32_t max_top_logprobs = 20;               // --max-top-logprobs: logprobs, top_logprobs, n_probs (OpenAI: 20)
    int32_t max_tokens       = 0;                // --max-tokens-limit: tokens one request may generate (0 = no limit)
    int32_t max_stop         = 16;               // --max-stop: stop strings in one request
    int32_t max_prompts      = 64;               // --max-prompts: prompts in one completion request
    int32_t max_grammar      = 256 * 1024;       // --max-grammar-bytes: grammar, json_schema, response_format, tools
    int32_t max_body         = 16 * 1024 * 1024; // --max-body-bytes: a request body
    int32_t max_json_depth   = 64;               // --max-json-depth: nesting of arrays and objects in a body
};

// what /v1/completions generates when a body sets no max_tokens and the server no --n-predict (OpenAI's default)
constexpr int32_t SERVER_OAI_CMPL_DEFAULT_MAX_TOKENS = 16;
