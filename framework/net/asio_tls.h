// A TlsClientContext as Asio sees it, for the Beast clients (upstream engines, HTTP posts).
#pragma once

#include <boost/asio/ssl/context.hpp>

#include "framework/net/tls_client.h"

namespace chatflow::net {

// An asio::ssl::context over `tls`'s OpenSSL context: one more reference to it, let go of when
// the Asio context goes, so both may end in either order.
inline boost::asio::ssl::context asio_context(const TlsClientContext& tls) {
  SSL_CTX_up_ref(tls.native_handle());
  return boost::asio::ssl::context(tls.native_handle());
}

}  // namespace chatflow::net
