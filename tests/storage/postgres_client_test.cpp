#include "framework/storage/postgres_client.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/postgres_server.h"

namespace chatflow::postgres {
namespace {

using ClientTest = testing::PostgresDatabaseTest;

ClientOptions options_for(const std::string& url, size_t pool_size = 4) {
  ClientOptions options;
  options.url = url;
  options.pool_size = pool_size;
  return options;
}

TEST_F(ClientTest, AnUnreachableServerIsNamedWithoutItsPassword) {
  ClientOptions options;
  // The shared server's port with another user, and a port nobody listens on.
  options.url = "postgresql://nobody:s3cret@127.0.0.1:1/chatflow";
  options.connect_timeout_s = 2;
  try {
    Client client(options);
    FAIL() << "connected to a port nobody listens on";
  } catch (const PostgresError& error) {
    std::string message = error.what();
    EXPECT_NE(
        message.find("cannot connect to PostgreSQL at postgresql://nobody@127.0.0.1:1/chatflow"),
        std::string::npos)
        << message;
    EXPECT_EQ(message.find("s3cret"), std::string::npos) << message;
  }
}

TEST_F(ClientTest, BytesRoundTripExactlyAndTextRefusesNul) {
  Client client(options_for(url_));
  std::string bytes("a\0b\xff\xfe end", 9);
  Result echoed = client.exec("SELECT $1::bytea, $2::text, $3::bigint",
                              {Param::bytes(bytes), Param::text("plain"), Param::integer(-42)});
  EXPECT_EQ(echoed.bytes(0, 0), bytes);
  EXPECT_EQ(echoed.text(0, 1), "plain");
  EXPECT_EQ(echoed.integer(0, 2), -42);
  try {
    client.exec("SELECT $1::text", {Param::text(std::string("a\0b", 3))}, "echoing");
    FAIL() << "a NUL byte went into a text parameter";
  } catch (const PostgresError& error) {
    EXPECT_NE(std::string(error.what()).find("echoing: text parameter $1 holds a NUL byte"),
              std::string::npos)
        << error.what();
  }
}

TEST_F(ClientTest, AServerErrorNamesTheServerWhatFailedAndItsState) {
  Client client(options_for(url_));
  try {
    client.exec("SELECT * FROM no_such_table", {}, "reading the table");
    FAIL();
  } catch (const PostgresError& error) {
    std::string message = error.what();
    EXPECT_EQ(error.sqlstate(), "42P01");
    EXPECT_NE(message.find(client.server() + ": reading the table: relation \"no_such_table\""),
              std::string::npos)
        << message;
  }
}

TEST_F(ClientTest, TheStatementTimeoutCancelsALongStatement) {
  ClientOptions options = options_for(url_);
  options.statement_timeout_ms = 100;
  Client client(options);
  try {
    client.exec("SELECT pg_sleep(30)");
    FAIL() << "the statement ran past its timeout";
  } catch (const PostgresError& error) {
    EXPECT_EQ(error.sqlstate(), "57014") << error.what();  // query_canceled
  }
  EXPECT_EQ(client.exec("SELECT 1").integer(0, 0), 1) << "the connection is still usable";
}

TEST_F(ClientTest, ThePoolLendsNoMoreThanItsSize) {
  ClientOptions options = options_for(url_, 2);
  options.borrow_timeout = std::chrono::milliseconds(200);
  Client client(options);
  Client::Lease first = client.borrow();
  Client::Lease second = client.borrow();
  EXPECT_THROW(client.borrow(), PostgresError);
  { Client::Lease gone = std::move(second); }
  Client::Lease third = client.borrow();
  EXPECT_EQ(third->exec("SELECT 7").integer(0, 0), 7);
}

TEST_F(ClientTest, AConnectionTheServerClosedIsReplaced) {
  Client client(options_for(url_, 1));
  int64_t pid = client.exec("SELECT pg_backend_pid()").integer(0, 0);
  Client admin(options_for(url_, 1));
  admin.exec("SELECT pg_terminate_backend($1::integer)", {Param::integer(pid)});
  // The server closes the connection a moment after it answered: wait until it is gone.
  for (int i = 0; i < 200; ++i) {
    Result alive = admin.exec("SELECT count(*) FROM pg_stat_activity WHERE pid = $1::integer",
                              {Param::integer(pid)});
    if (alive.integer(0, 0) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int64_t replaced = client.exec("SELECT pg_backend_pid()").integer(0, 0);
  EXPECT_NE(replaced, pid);
}

TEST_F(ClientTest, TransactionsRollBackOnErrorAndCommitOtherwise) {
  Client client(options_for(url_));
  client.exec("CREATE TABLE items (name TEXT PRIMARY KEY)");
  EXPECT_THROW(client.transaction([](Connection& connection) {
    connection.exec("INSERT INTO items VALUES ($1)", {Param::text("kept?")});
    throw std::runtime_error("the caller changed its mind");
  }),
               std::runtime_error);
  client.transaction([](Connection& connection) {
    connection.exec("INSERT INTO items VALUES ($1)", {Param::text("kept")});
  });
  Result rows = client.exec("SELECT name FROM items");
  ASSERT_EQ(rows.rows(), 1);
  EXPECT_EQ(rows.text(0, 0), "kept");
}

// Read-modify-write under SERIALIZABLE from many threads: the server aborts the losers, and
// only retrying them keeps every increment.
TEST_F(ClientTest, SerializationFailuresAreRetriedUntilEveryIncrementCounts) {
  Client client(options_for(url_, 8));
  client.exec("CREATE TABLE counter (value BIGINT NOT NULL)");
  client.exec("INSERT INTO counter VALUES (0)");
  constexpr int kThreads = 8;
  constexpr int kIncrements = 15;
  std::atomic<int> attempts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        client.transaction(
            [&](Connection& connection) {
              ++attempts;
              connection.exec("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE");
              int64_t value = connection.exec("SELECT value FROM counter").integer(0, 0);
              connection.exec("UPDATE counter SET value = $1", {Param::integer(value + 1)});
            },
            /*attempts=*/1000);
      }
    });
  }
  for (auto& thread : threads)
    thread.join();
  EXPECT_EQ(client.exec("SELECT value FROM counter").integer(0, 0), kThreads * kIncrements);
  EXPECT_GT(attempts.load(), kThreads * kIncrements) << "no transaction was ever retried";
}

std::vector<Migration> two_migrations() {
  return {{1,
           "a table",
           {"CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)",
            "INSERT INTO notes VALUES (1, 'first')"}},
          {2, "a column", {"ALTER TABLE notes ADD COLUMN author TEXT NOT NULL DEFAULT ''"}}};
}

// Eight replicas starting at once: each migration runs exactly once (a second run of the first
// would fail on CREATE TABLE; a second INSERT would add a row).
TEST_F(ClientTest, MigrationsRunOnceWhenReplicasStartTogether) {
  constexpr int kReplicas = 8;
  std::atomic<int> failures{0};
  std::vector<std::thread> replicas;
  for (int i = 0; i < kReplicas; ++i) {
    replicas.emplace_back([&] {
      try {
        Client client(options_for(url_, 1));
        client.migrate("notes", two_migrations());
      } catch (const PostgresError& error) {
        ADD_FAILURE() << error.what();
        ++failures;
      }
    });
  }
  for (auto& replica : replicas)
    replica.join();
  EXPECT_EQ(failures.load(), 0);
  Client client(options_for(url_));
  EXPECT_EQ(client.exec("SELECT count(*) FROM notes").integer(0, 0), 1);
  Result versions = client.exec(
      "SELECT version, description FROM schema_migrations WHERE component = $1 ORDER BY version",
      {Param::text("notes")});
  ASSERT_EQ(versions.rows(), 2);
  EXPECT_EQ(versions.integer(0, 0), 1);
  EXPECT_EQ(versions.text(1, 1), "a column");
  EXPECT_EQ(client.exec("SELECT author FROM notes").text(0, 0), "");
}

TEST_F(ClientTest, AFailedMigrationLeavesNothingOfItselfAndSaysWhichItWas) {
  Client client(options_for(url_));
  std::vector<Migration> migrations = two_migrations();
  migrations[1].statements = {"CREATE TABLE half_done (id INTEGER)", "THIS IS NOT SQL"};
  try {
    client.migrate("notes", migrations);
    FAIL() << "a broken migration was applied";
  } catch (const PostgresError& error) {
    EXPECT_NE(std::string(error.what()).find("migration notes 2 (a column)"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(client.exec("SELECT max(version) FROM schema_migrations").integer(0, 0), 1);
  EXPECT_EQ(client.exec("SELECT to_regclass('half_done') IS NULL").text(0, 0), "t")
      << "the failed migration's first statement was rolled back with it";
}

TEST_F(ClientTest, ADatabaseFromANewerChatflowIsRefused) {
  Client client(options_for(url_));
  client.migrate("notes", two_migrations());
  std::vector<Migration> older = two_migrations();
  older.pop_back();
  try {
    client.migrate("notes", older);
    FAIL() << "an older chatflow went on with a newer schema";
  } catch (const PostgresError& error) {
    EXPECT_NE(
        std::string(error.what()).find("at version 2 but this chatflow knows versions up to 1"),
        std::string::npos)
        << error.what();
  }
}

TEST(PostgresServerName, KeepsUserHostPortAndDatabaseButNeverThePassword) {
  EXPECT_EQ(describe_server("postgresql://ann:pw@db.example:6432/chat?sslmode=require"),
            "postgresql://ann@db.example:6432/chat");
  EXPECT_EQ(describe_server("host=10.0.0.5 port=5433 dbname=chat user=bob password=pw"),
            "postgresql://bob@10.0.0.5:5433/chat");
  EXPECT_EQ(describe_server("postgresql://%zz"), "(an unreadable PostgreSQL URL)");
}

}  // namespace
}  // namespace chatflow::postgres
