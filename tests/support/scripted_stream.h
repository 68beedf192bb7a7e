// A request stage for the tests of stream stages (detokenize, sse_emit): it streams exactly the
// chunks a test put on the request, so that what the stage under test receives is known to the
// byte, then ends the stream or fails the request as the script says.
#pragma once

#include <optional>
#include <vector>

#include "framework/api/registry.h"

namespace chatflow::testing {

struct StreamScript {
  StreamScript(std::vector<Chunk> chunks, std::optional<RequestError> failure = std::nullopt)
      : chunks(std::move(chunks)), failure(std::move(failure)) {}
  std::vector<Chunk> chunks;            // written in order (give the last one a finish)
  std::optional<RequestError> failure;  // then the request fails with it
};

// The script the `scripted_stream` stage plays for `request`.
void attach_script(Request& request, StreamScript script);

// The built-in registry with the `scripted_stream` stage type added (port `out`, a stream).
Registry registry_with_scripted_stream();

}  // namespace chatflow::testing
