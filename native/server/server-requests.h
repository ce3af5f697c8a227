#pragma once

// pymtp: llama-server's request checks and OpenAI formats that are not upstream's. What one request may
// cost (server-limits.h): body size and nesting before parsing, then per endpoint the limits and the
// shapes upstream reads loosely, each failure a std::invalid_argument (a 400 naming the limit or key).
// And the legacy "logprobs" object of /v1/completions. Compiled into llama-server's server-context
// library by native/CMakeLists.txt; tools/server/server-http.cpp, server-context.cpp and server-task.cpp
// call it.

#include "json.h" // common_json (upstream common/)
#include "server-limits.h"

#include <string>
#include <vector>

struct completion_token_output; // tools/server/server-task.h

enum server_request_kind {
    SERVER_REQUEST_COMPLETION,     // /completion, /infill: llama.cpp's own fields
    SERVER_REQUEST_OAI_COMPLETION, // /v1/completions
    SERVER_REQUEST_OAI_CHAT,       // /v1/chat/completions (before its messages become a prompt)
};

// The error message for a raw body over --max-body-bytes or nested deeper than --max-json-depth ("" when
// it is within both). Reads the bytes once, without parsing, so a hostile body costs no allocation.
std::string server_check_body(const std::string & body, const server_limits & lim);

// A parsed request body checked against the limits, with the server's defaults filled in: a
// /v1/completions body without max_tokens gets OpenAI's 16 unless the server has --n-predict; a body
// without one gets at most --max-tokens-limit. Throws std::invalid_argument naming the field or limit.
common_json server_prepare_request(common_json body, server_request_kind kind, const server_limits & lim,
                                   int32_t n_predict_default);

// A 400 naming key unless every integer in value (a token id, or an array holding some) is in 0..n_vocab-1.
void server_check_token_ids(const common_json & value, int32_t n_vocab, const char * key);

// OpenAI's legacy completions "logprobs" object for these tokens: "tokens", "token_logprobs",
// "top_logprobs" (one {token: logprob} object per token) and "text_offset" (where each token starts in
// the choice's text, in characters, counting from text_offset0), beside llama.cpp's per-token "content"
// list. post_sampling: the tokens carry probabilities, reported as their logarithms.
common_json server_oai_cmpl_logprobs(const std::vector<completion_token_output> & probs, bool post_sampling,
                                     size_t text_offset0);

// The number of characters (code points) in the first n_bytes bytes of a UTF-8 string.
size_t server_utf8_chars(const std::string & s, size_t n_bytes);
