// Whether a host name or address is this machine's own (loopback), for the rule that plain
// http:// goes only there: across a network anyone on the way reads what is sent (an API key,
// the prompts) and can answer in the real server's place (a key set of their own, a verdict).
#pragma once

#include <string_view>

namespace chatflow::security {

// "localhost", 127.0.0.0/8, ::1, or an IPv4-mapped 127.x address; written as a URL holds it,
// IPv6 without brackets.
bool is_loopback_host(std::string_view host);

}  // namespace chatflow::security
