// Eight clients, each with its own connection to one node of a 2 x 2
// cluster, open, read, write and close overlapping and disjoint sessions on
// two models for a bounded time. Every call has a deadline, so a deadlock
// fails the test instead of hanging it. Each writer adds a known integer to
// the tensors it holds; at the end every tensor must equal its seeded init
// plus the sum of the increments of the writebacks that succeeded (no lost
// or torn write), on every rank and through every node.

#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_calls.h"
#include "tests/cluster/cluster_values.h"
#include "tests/cluster/local_cluster.h"

namespace summon::tests {
namespace {

using ::summon::client::SummonClient;

// Float64, so seeded values (multiples of 2^-24) plus integer increments
// stay exact whatever the order of the additions.
constexpr char kLayout[] = R"({"strategy": "FULL_SHARD", "units": [
    {"fqn": "", "params": [{"fqn": "emb.w", "shape": [20], "dtype": "float64"}]},
    {"fqn": "u0", "params": [{"fqn": "u0.w", "shape": [37], "dtype": "float64"}]},
    {"fqn": "u1", "params": [{"fqn": "u1.w", "shape": [50], "dtype": "float64"}]},
    {"fqn": "u2", "params": [{"fqn": "u2.w", "shape": [8, 8], "dtype": "float64"}]},
    {"fqn": "u3", "params": [{"fqn": "u3.w", "shape": [101], "dtype": "float64"}]}]})";
constexpr int kUnits = 4;  // u0..u3; the root is only read.
constexpr int kClients = 8;
constexpr absl::Duration kRunTime = absl::Seconds(10);

std::string UnitParam(int unit) { return absl::StrCat("u", unit, ".w"); }

std::vector<double> Doubles(const std::string& bytes) {
  std::vector<double> values(bytes.size() / sizeof(double));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(double));
  return values;
}

std::string DoubleBytes(const std::vector<double>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()),
                     values.size() * sizeof(double));
}

// What the clients did; shared by every thread.
struct Ledger {
  std::mutex mu;
  // Sum of the increments of successful writebacks, by (model, param).
  std::map<std::pair<std::string, std::string>, double> committed;
  std::vector<std::string> errors;
  int opens = 0;
  int busy = 0;  // Writable opens refused with FAILED_PRECONDITION (R2).
  int writebacks = 0;
  int aborts = 0;
  int reads = 0;

  void Error(std::string what) {
    std::lock_guard<std::mutex> lock(mu);
    if (errors.size() < 20) errors.push_back(std::move(what));
  }
};

class Client {
 public:
  Client(int id, const SummonClient& node, const std::vector<v1::Model>& models,
         const std::map<std::string, TensorBytes>& seeded, Ledger& ledger)
      : id_(id),
        node_(node),
        models_(models),
        seeded_(seeded),
        ledger_(ledger),
        random_(1000 + id) {}

  void Run(absl::Time until) {
    while (absl::Now() < until) {
      const v1::Model& model = models_[Pick(models_.size())];
      const int choice = Pick(10);
      if (choice < 5) {
        Write(model);
      } else {
        Read(model);
      }
    }
  }

 private:
  size_t Pick(size_t n) {
    return std::uniform_int_distribution<size_t>(0, n - 1)(random_);
  }

  // Checks that every element of `fqn` is its seeded value plus one common
  // integer (a writeback is all or nothing), never less than this client
  // saw before (writebacks only add); returns that integer.
  std::optional<double> Increment(const std::string& model,
                                  const std::string& fqn,
                                  const std::string& bytes) {
    const std::vector<double> values = Doubles(bytes);
    const std::vector<double> seeded = Doubles(seeded_.at(model).at(fqn));
    if (values.size() != seeded.size()) {
      ledger_.Error(absl::StrCat(model, "/", fqn, ": read ", values.size(),
                                 " elements, expected ", seeded.size()));
      return std::nullopt;
    }
    const double increment = values[0] - seeded[0];
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i] - seeded[i] != increment) {
        ledger_.Error(absl::StrCat(model, "/", fqn, ": element ", i, " is +",
                                   values[i] - seeded[i], " but element 0 +",
                                   increment, " (torn writeback)"));
        return std::nullopt;
      }
    }
    double& last = seen_[{model, fqn}];
    if (increment < last) {
      ledger_.Error(absl::StrCat(model, "/", fqn, ": read +", increment,
                                 " after +", last, " (lost writeback)"));
    }
    last = increment;
    return increment;
  }

  // Records an unexpected status; an open session is aborted so that it
  // does not hold its units until its lease runs out.
  void Failed(const std::string& call, const absl::Status& status,
              const std::string& open_session = "") {
    ledger_.Error(
        absl::StrCat("client ", id_, ": ", call, ": ", status.ToString()));
    if (!open_session.empty()) {
      node_.CloseSession(open_session, /*abort=*/true).IgnoreError();
    }
  }

  // A writable session on one unit, or on two units through a parameter
  // list (overlapping the single-unit ones), sometimes rank0_only.
  void Write(const v1::Model& model) {
    std::vector<std::string> fqns = {UnitParam(Pick(kUnits))};
    if (Pick(3) == 0) {
      const std::string second = UnitParam(Pick(kUnits));
      if (second != fqns[0]) fqns.push_back(second);
    }
    v1::SessionOptions options = ParamScope(fqns);
    if (Pick(4) == 0) {
      options.set_rank0_only(true);
      options.set_home_rank(static_cast<int>(Pick(model.world_size())));
    }
    absl::StatusOr<v1::Session> session =
        node_.OpenSession(model.name(), options);
    {
      std::lock_guard<std::mutex> lock(ledger_.mu);
      ++ledger_.opens;
      if (session.status().code() == absl::StatusCode::kFailedPrecondition) {
        ++ledger_.busy;
        return;
      }
    }
    if (!session.ok()) return Failed("OpenSession", session.status());
    const double delta = static_cast<double>(id_ + 1);
    for (const std::string& fqn : fqns) {
      client::ReadTensorParams read;
      read.tensor = {session->id(), fqn, false};
      absl::StatusOr<client::TensorData> data = node_.ReadTensor(read);
      if (!data.ok()) {
        return Failed("ReadTensor", data.status(), session->id());
      }
      if (!Increment(model.name(), fqn, data->data).has_value()) {
        // Increment recorded why; the session must not linger.
        node_.CloseSession(session->id(), /*abort=*/true).IgnoreError();
        return;
      }
      std::vector<double> values = Doubles(data->data);
      for (double& value : values) value += delta;
      client::WriteTensorParams write;
      write.tensor = read.tensor;
      write.dtype = v1::DTYPE_FLOAT64;
      absl::Status written =
          node_.WriteTensor(write, DoubleBytes(values)).status();
      if (!written.ok()) return Failed("WriteTensor", written, session->id());
    }
    // One close in five aborts: its increments must not land anywhere.
    const bool abort = Pick(5) == 0;
    absl::StatusOr<v1::CloseSessionResponse> closed =
        node_.CloseSession(session->id(), abort);
    if (!closed.ok()) return Failed("CloseSession", closed.status());
    if (!abort && !closed->written_back()) {
      return ledger_.Error("a writable close did not write back");
    }
    std::lock_guard<std::mutex> lock(ledger_.mu);
    if (abort) {
      ++ledger_.aborts;
      return;
    }
    ++ledger_.writebacks;
    for (const std::string& fqn : fqns) {
      ledger_.committed[{model.name(), fqn}] += delta;
    }
  }

  // A read-only session on the whole model or one unit (overlapping the
  // writable ones); it also edits its private copy, which must not leak.
  void Read(const v1::Model& model) {
    const bool whole = Pick(2) == 0;
    const int unit = static_cast<int>(Pick(kUnits));
    v1::SessionOptions options =
        ReadOnly(whole ? v1::SessionOptions() : ParamScope({UnitParam(unit)}));
    absl::StatusOr<v1::Session> session =
        node_.OpenSession(model.name(), options);
    {
      std::lock_guard<std::mutex> lock(ledger_.mu);
      ++ledger_.opens;
    }
    if (!session.ok())
      return Failed("OpenSession (read-only)", session.status());
    for (const v1::TensorInfo& tensor : session->params()) {
      client::ReadTensorParams read;
      read.tensor = {session->id(), tensor.fqn(), false};
      absl::StatusOr<client::TensorData> data = node_.ReadTensor(read);
      if (!data.ok()) {
        return Failed("ReadTensor (read-only)", data.status(), session->id());
      }
      Increment(model.name(), tensor.fqn(), data->data);
      std::lock_guard<std::mutex> lock(ledger_.mu);
      ++ledger_.reads;
    }
    const v1::TensorInfo& edited = session->params(0);
    client::WriteTensorParams write;
    write.tensor = {session->id(), edited.fqn(), false};
    write.dtype = v1::DTYPE_FLOAT64;
    const std::string junk(edited.numel() * sizeof(double), '\x7f');
    if (absl::Status written = node_.WriteTensor(write, junk).status();
        !written.ok()) {
      return Failed("WriteTensor (read-only)", written, session->id());
    }
    absl::StatusOr<v1::CloseSessionResponse> closed =
        node_.CloseSession(session->id());
    if (!closed.ok())
      return Failed("CloseSession (read-only)", closed.status());
    if (closed->written_back()) {
      ledger_.Error("a read-only session wrote back");
    }
  }

  const int id_;
  const SummonClient& node_;
  const std::vector<v1::Model>& models_;
  const std::map<std::string, TensorBytes>& seeded_;
  Ledger& ledger_;
  std::mt19937 random_;
  std::map<std::pair<std::string, std::string>, double> seen_;
};

TEST(ClusterConcurrencyTest, ConcurrentClientsNeitherDeadlockNorLoseWrites) {
  LocalCluster::Options options;
  options.nodes = 2;
  options.local_ranks = 2;
  options.call_timeout = absl::Seconds(15);
  absl::StatusOr<std::unique_ptr<LocalCluster>> started =
      LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;

  std::vector<v1::Model> models;
  std::map<std::string, TensorBytes> seeded;
  for (const v1::ShardingStrategy strategy :
       {v1::SHARDING_STRATEGY_FULL_SHARD, v1::SHARDING_STRATEGY_HYBRID_SHARD}) {
    const std::string name = v1::ShardingStrategy_Name(strategy);
    models.push_back(CreateSeeded(cluster.client(1), name, kLayout, strategy));
    ASSERT_EQ(models.back().name(), name);
    seeded[name] = SeededModel(models.back());
  }

  // Every client has its own connection, to one of the two nodes.
  std::vector<std::unique_ptr<SummonClient>> connections;
  client::ClientOptions client_options;
  client_options.timeout = options.call_timeout;
  for (int id = 0; id < kClients; ++id) {
    connections.push_back(std::make_unique<SummonClient>(
        cluster.address(id % cluster.nodes()), client_options));
  }
  Ledger ledger;
  const absl::Time until = absl::Now() + kRunTime;
  std::vector<std::thread> threads;
  for (int id = 0; id < kClients; ++id) {
    threads.emplace_back([&, id] {
      Client(id, *connections[id], models, seeded, ledger).Run(until);
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::cout << "opens " << ledger.opens << ", refused busy " << ledger.busy
            << ", writebacks " << ledger.writebacks << ", aborted "
            << ledger.aborts << ", tensor reads " << ledger.reads << "\n";
  for (const std::string& error : ledger.errors) ADD_FAILURE() << error;
  // The run did real work on both sides of the contention.
  EXPECT_GT(ledger.writebacks, kClients);
  EXPECT_GT(ledger.reads, kClients);

  for (const v1::Model& model : models) {
    SCOPED_TRACE(model.name());
    TensorBytes expected;
    for (const auto& [fqn, bytes] : seeded.at(model.name())) {
      std::vector<double> values = Doubles(bytes);
      const auto it = ledger.committed.find({model.name(), fqn});
      if (it != ledger.committed.end()) {
        for (double& value : values) value += it->second;
      }
      expected[fqn] = DoubleBytes(values);
    }
    // Every rank's shard (every replica) and every node's reads agree.
    EXPECT_EQ(ParamChecksums(ChecksumOk(cluster.client(0), model.name())),
              ExpectedChecksums(model, expected));
    for (int via = 0; via < cluster.nodes(); ++via) {
      const v1::Session check =
          OpenOk(cluster.client(via), model.name(), ReadOnly());
      for (const auto& [fqn, bytes] : expected) {
        EXPECT_EQ(Doubles(ReadOk(cluster.client(via), check.id(), fqn)),
                  Doubles(bytes))
            << fqn << " via node " << via;
      }
      CloseOk(cluster.client(via), check.id());
    }
  }
  connections.clear();
  const absl::Status stopped = cluster.Stop();
  EXPECT_TRUE(stopped.ok()) << stopped;
}

}  // namespace
}  // namespace summon::tests
