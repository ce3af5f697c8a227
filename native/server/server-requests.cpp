#include "server-requests.h"

#include "server-task.h" // completion_token_output (upstream tools/server/)

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

static std::string fmt_limit(const char * what, long long got, long long limit, const char * flag) {
    return std::string(what) + " is " + std::to_string(got) + "; this server allows at most " + std::to_string(limit) +
           " (" + flag + ")";
}

std::string server_check_body(const std::string & body, const server_limits & lim) {
    if (lim.max_body > 0 && body.size() > (size_t) lim.max_body) {
        return fmt_limit("The request body's size in bytes", (long long) body.size(), lim.max_body, "--max-body-bytes");
    }
    if (lim.max_json_depth <= 0) {
        return "";
    }
    // nesting of [ and { outside strings; the parser reports anything malformed later
    int  depth     = 0;
    bool in_string = false;
    for (size_t i = 0; i < body.size(); i++) {
        const char c = body[i];
        if (in_string) {
            if (c == '\\') {
                i++;
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > lim.max_json_depth) {
                return "The request body nests arrays and objects more than " + std::to_string(lim.max_json_depth) +
                       " deep, this server's limit (--max-json-depth)";
            }
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return "";
}

// the integer value of a body's key, or fallback when absent or null; a 400 naming the key when it is no integer
static bool get_int(const common_json & body, const char * key, long long & out) {
    if (!body.contains(key) || body.at(key).is_null()) {
        return false;
    }
    const common_json & v = body.at(key);
    if (v.is_boolean() || !v.is_number()) {
        throw std::invalid_argument(std::string("'") + key + "' must be an integer, got " + v.dump_safe());
    }
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) {
        throw std::invalid_argument(std::string("'") + key + "' must be an integer, got " + v.dump_safe());
    }
    out = (long long) d;
    return true;
}

static void check_size(const common_json & body, const char * key, const server_limits & lim) {
    if (lim.max_grammar <= 0 || !body.contains(key) || body.at(key).is_null()) {
        return;
    }
    const common_json & v    = body.at(key);
    const size_t        size = v.is_string() ? v.get<std::string>().size() : v.dump().size();
    if (size > (size_t) lim.max_grammar) {
        throw std::invalid_argument(fmt_limit((std::string("'") + key + "' in bytes").c_str(), (long long) size,
                                              lim.max_grammar, "--max-grammar-bytes"));
    }
}

// what upstream's chat template code reads from each message without checking its type first
static void check_messages(const common_json & body) {
    if (!body.contains("messages")) {
        return; // upstream: "'messages' is required"
    }
    const common_json & messages = body.at("messages");
    if (!messages.is_array()) {
        throw std::invalid_argument("'messages' must be an array of message objects");
    }
    for (size_t i = 0; i < messages.size(); i++) {
        const common_json & m  = messages.at(i);
        const std::string   at = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) {
            throw std::invalid_argument(at + " must be an object with 'role' and 'content'");
        }
        if (!m.contains("role") || !m.at("role").is_string()) {
            throw std::invalid_argument(at + ".role must be a string (\"system\", \"user\", \"assistant\", \"tool\")");
        }
        for (const char * key : { "name", "tool_call_id", "reasoning_content" }) {
            if (m.contains(key) && !m.at(key).is_null() && !m.at(key).is_string()) {
                throw std::invalid_argument(at + "." + key + " must be a string");
            }
        }
        if (m.contains("content") && m.at("content").is_array()) {
            const common_json & parts = m.at("content");
            for (size_t j = 0; j < parts.size(); j++) {
                const common_json & p     = parts.at(j);
                const std::string   where = at + ".content[" + std::to_string(j) + "]";
                if (!p.is_object() || !p.contains("type") || !p.at("type").is_string()) {
                    throw std::invalid_argument(where + " must be an object with a string 'type'");
                }
                if (p.at("type").get<std::string>() == "text" && (!p.contains("text") || !p.at("text").is_string())) {
                    throw std::invalid_argument(where + ".text must be a string");
                }
            }
        }
        if (m.contains("tool_calls") && !m.at("tool_calls").is_null()) {
            const common_json & calls = m.at("tool_calls");
            if (!calls.is_array()) {
                throw std::invalid_argument(at + ".tool_calls must be an array");
            }
            for (size_t j = 0; j < calls.size(); j++) {
                const common_json & c     = calls.at(j);
                const std::string   where = at + ".tool_calls[" + std::to_string(j) + "]";
                if (!c.is_object() || !c.contains("function") || !c.at("function").is_object()) {
                    throw std::invalid_argument(where + " must be an object with a 'function' object");
                }
                const common_json & f = c.at("function");
                if (!f.contains("name") || !f.at("name").is_string()) {
                    throw std::invalid_argument(where + ".function.name must be a string");
                }
                if (c.contains("id") && !c.at("id").is_null() && !c.at("id").is_string()) {
                    throw std::invalid_argument(where + ".id must be a string");
                }
            }
        }
    }
}

static void check_stop(const common_json & body, const server_limits & lim) {
    if (!body.contains("stop") || body.at("stop").is_null()) {
        return;
    }
    const common_json & stop = body.at("stop");
    if (stop.is_string()) {
        return;
    }
    if (!stop.is_array()) {
        throw std::invalid_argument("'stop' must be a string or an array of strings");
    }
    for (size_t i = 0; i < stop.size(); i++) {
        if (!stop.at(i).is_string()) {
            throw std::invalid_argument("'stop' must be a string or an array of strings; stop[" + std::to_string(i) +
                                        "] is " + stop.at(i).dump_safe());
        }
    }
    if (lim.max_stop > 0 && stop.size() > (size_t) lim.max_stop) {
        throw std::invalid_argument(
            fmt_limit("The number of stop strings", (long long) stop.size(), lim.max_stop, "--max-stop"));
    }
}

common_json server_prepare_request(common_json body, server_request_kind kind, const server_limits & lim,
                                   int32_t n_predict_default) {
    if (!body.is_object()) {
        throw std::invalid_argument("The request body must be a JSON object");
    }

    // top log probabilities: OpenAI caps them at 20, and each costs a sort over the vocabulary per token
    long long n = 0;
    for (const char * key : { "n_probs", "top_logprobs", "logprobs" }) {
        if (kind == SERVER_REQUEST_OAI_CHAT && std::string(key) == "logprobs") {
            if (body.contains(key) && !body.at(key).is_null() && !body.at(key).is_boolean()) {
                throw std::invalid_argument("'logprobs' must be true or false (the count is 'top_logprobs')");
            }
            continue;
        }
        if (!get_int(body, key, n)) {
            continue;
        }
        if (n < 0) {
            throw std::invalid_argument(std::string("'") + key + "' must be >= 0, got " + std::to_string(n));
        }
        if (n > lim.max_top_logprobs) {
            throw std::invalid_argument(
                fmt_limit((std::string("'") + key + "'").c_str(), n, lim.max_top_logprobs, "--max-top-logprobs"));
        }
    }
    if (kind == SERVER_REQUEST_OAI_CHAT && body.contains("logprobs") && body.at("logprobs").is_boolean() &&
        body.at("logprobs").get<bool>() && !get_int(body, "top_logprobs", n)) {
        body["top_logprobs"] = std::min(20, lim.max_top_logprobs); // upstream's default for "logprobs": true
    }

    // tokens to generate: the body's, else the server's default, else OpenAI's 16 on /v1/completions
    bool has_max = false;
    for (const char * key : { "n_predict", "max_tokens", "max_completion_tokens" }) {
        if (!get_int(body, key, n)) {
            continue;
        }
        has_max = true;
        if (lim.max_tokens > 0 && n < 0) {
            body[key] = lim.max_tokens; // -1 (until the end): the limit is the end
        } else if (lim.max_tokens > 0 && n > lim.max_tokens) {
            throw std::invalid_argument(
                fmt_limit((std::string("'") + key + "'").c_str(), n, lim.max_tokens, "--max-tokens-limit"));
        }
    }
    if (!has_max) {
        int32_t def = n_predict_default;
        if (kind == SERVER_REQUEST_OAI_COMPLETION && def < 0) {
            def = SERVER_OAI_CMPL_DEFAULT_MAX_TOKENS;
        }
        if (lim.max_tokens > 0 && (def < 0 || def > lim.max_tokens)) {
            def = lim.max_tokens;
        }
        if (def >= 0) {
            body["n_predict"] = def;
        }
    }

    // several prompts (an array holding no token ids at its top) each generate as a request of their own
    if (kind != SERVER_REQUEST_OAI_CHAT && lim.max_prompts > 0 && body.contains("prompt") &&
        body.at("prompt").is_array()) {
        const common_json & prompts     = body.at("prompt");
        bool                has_numbers = false;
        for (size_t i = 0; i < prompts.size() && !has_numbers; i++) {
            has_numbers = prompts.at(i).is_number();
        }
        if (!has_numbers && prompts.size() > (size_t) lim.max_prompts) {
            throw std::invalid_argument(
                fmt_limit("The number of prompts", (long long) prompts.size(), lim.max_prompts, "--max-prompts"));
        }
    }

    check_stop(body, lim);
    for (const char * key : { "grammar", "json_schema", "response_format", "tools" }) {
        check_size(body, key, lim);
    }
    if (kind == SERVER_REQUEST_OAI_CHAT) {
        check_messages(body);
    }
    return body;
}

void server_check_token_ids(const common_json & value, int32_t n_vocab, const char * key) {
    auto check = [&](const common_json & v) {
        if (v.is_number()) { // 5.0 reads as the token 5
            const double id = v.get<double>();
            if (!(id >= 0 && id < n_vocab)) {
                throw std::invalid_argument(std::string("'") + key + "' holds the token id " + v.dump() +
                                            ", outside this model's vocabulary (0.." + std::to_string(n_vocab - 1) +
                                            ")");
            }
        }
    };
    if (value.is_array()) {
        for (size_t i = 0; i < value.size(); i++) {
            check(value.at(i));
        }
    } else {
        check(value);
    }
}

size_t server_utf8_chars(const std::string & s, size_t n_bytes) {
    size_t n = 0;
    for (size_t i = 0; i < n_bytes && i < s.size(); i++) {
        n += ((unsigned char) s[i] & 0xC0) != 0x80; // every byte but a continuation byte starts a character
    }
    return n;
}

common_json server_oai_cmpl_logprobs(const std::vector<completion_token_output> & probs, bool post_sampling,
                                     size_t text_offset0) {
    auto as_log = [](float p) { return completion_token_output::logarithm(p); }; // never -inf (JSON has none)
    auto valid  = [](std::string s) {
        s.resize(validate_utf8(s));
        return s;
    };
    common_json tokens = common_json::array(), token_logprobs = common_json::array(), top = common_json::array(),
                offsets = common_json::array();
    size_t      offset  = text_offset0;
    for (const auto & p : probs) {
        const std::string text = valid(p.text_to_send);
        tokens.push_back(text);
        token_logprobs.push_back(as_log(p.prob));
        common_json alternatives = common_json::object();
        for (const auto & alt : p.probs) {
            const std::string t = valid(alt.txt);
            if (!alternatives.contains(t)) { // two tokens of one text: the more likely (they come sorted)
                alternatives[t] = as_log(alt.prob);
            }
        }
        top.push_back(alternatives);
        offsets.push_back(offset);
        offset += server_utf8_chars(p.text_to_send, p.text_to_send.size());
    }
    return common_json{
        { "content", completion_token_output::probs_vector_to_json(probs, post_sampling) },
        { "tokens", tokens },
        { "token_logprobs", token_logprobs },
        { "top_logprobs", top },
        { "text_offset", offsets },
    };
}
