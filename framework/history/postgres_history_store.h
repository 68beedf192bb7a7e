// Session history in PostgreSQL, shared by every replica that points at the same database: a
// session begun on one replica continues on another. The same promises as the SQLite store: a
// durable append returns once its transaction committed (with the server's default
// synchronous_commit=on the turn then survives a crash of chatflow and of the server), a
// non-durable one is queued to a writer thread; deletions and titles commit before they return.
// While the server cannot be reached, queued turns wait (at most `write_buffer_rows`, then they
// are dropped and counted in lost_turns()) and are written once it answers. Starting a session
// takes a per-owner advisory lock, so replicas together never keep more than
// max_sessions_per_owner of an owner's sessions.
//
// Tables (migrations of the component "history"): history_turns and history_titles. Every text
// a client or a model wrote is stored as bytea, byte for byte (U+0000 and broken UTF-8
// included), as the SQLite store keeps it.
#pragma once

#include <memory>

#include "framework/history/history_store.h"
#include "framework/storage/postgres_client.h"

namespace chatflow::history {

// Applies the history migrations; throws postgres::PostgresError when the server fails them.
std::unique_ptr<HistoryStore> make_postgres_store(std::shared_ptr<postgres::Client> client,
                                                  Retention retention = {},
                                                  size_t write_buffer_rows = 100'000);

}  // namespace chatflow::history
