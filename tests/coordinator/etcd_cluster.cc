#include "tests/coordinator/etcd_cluster.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "server/coordinator/etcd_client.h"
#include "tests/cluster/daemon_testing.h"

namespace summon::tests {

namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(30);
constexpr absl::Duration kPollInterval = absl::Milliseconds(50);

std::string HttpUrl(int port) {
  return absl::StrCat("http://127.0.0.1:", port);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

absl::Status Checked(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("etcd ", what, ": ", status.error_message()));
}

}  // namespace

std::string EtcdCluster::Url(int port) const {
  return absl::StrCat(options_.tls ? "https" : "http", "://127.0.0.1:", port);
}

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(
    Options options) {
  if (options.members < 1) {
    return absl::InvalidArgumentError("an etcd cluster needs a member");
  }
  if (access(options.etcd_binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.etcd_binary,
                     " is missing: scripts/setup installs etcd-server"));
  }
  std::unique_ptr<EtcdCluster> cluster(new EtcdCluster(std::move(options)));
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/summon-etcd-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  cluster->root_ = pattern;
  if (cluster->options_.tls) {
    const std::string make_pki = absl::StrCat(
        RunfilePath("tests/security/make_pki.sh"), " ", cluster->root_, "/pki");
    if (std::system(make_pki.c_str()) != 0) {
      return absl::UnavailableError(absl::StrCat("failed: ", make_pki));
    }
  }
  const int count = cluster->options_.members;
  absl::StatusOr<std::vector<int>> ports = PickFreePorts(2 * count);
  if (!ports.ok()) return ports.status();
  std::vector<std::string> peers;
  for (int i = 0; i < count; ++i) {
    Member member;
    member.name = absl::StrCat("m", i);
    member.client_port = (*ports)[2 * i];
    member.peer_port = (*ports)[2 * i + 1];
    member.data_dir = absl::StrCat(cluster->root_, "/", member.name);
    peers.push_back(absl::StrCat(member.name, "=", HttpUrl(member.peer_port)));
    cluster->members_.push_back(std::move(member));
  }
  cluster->initial_cluster_ = absl::StrJoin(peers, ",");
  for (int i = 0; i < count; ++i) {
    if (absl::Status spawned = cluster->Spawn(i); !spawned.ok()) {
      return spawned;
    }
  }
  if (absl::Status healthy = cluster->WaitHealthy(kStartTimeout);
      !healthy.ok()) {
    return healthy;
  }
  if (cluster->options_.auth) {
    if (absl::Status enabled = cluster->EnableAuth(); !enabled.ok()) {
      return enabled;
    }
  }
  return cluster;
}

EtcdCluster::~EtcdCluster() {
  for (Member& member : members_) {
    member.proxy.reset();
    if (member.process.running()) member.process.Kill().IgnoreError();
  }
  if (!root_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
}

absl::Status EtcdCluster::Spawn(int index) {
  Member& member = members_[index];
  std::string log_dir = options_.log_dir;
  if (log_dir.empty()) {
    const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
    log_dir = outputs != nullptr ? outputs : root_;
  }
  ChildProcess::Spec spec;
  // setpriv (util-linux) makes the member die with the test even when the
  // test is killed before its destructors run (a timeout): no etcd outlives
  // it. The death signal follows the spawning thread, so members are
  // started from the test's own thread.
  spec.argv = {
      "/usr/bin/setpriv",
      "--pdeathsig",
      "KILL",
      "--",
      options_.etcd_binary,
      "--name",
      member.name,
      "--data-dir",
      member.data_dir,
      "--listen-client-urls",
      Url(member.client_port),
      "--advertise-client-urls",
      Url(member.client_port),
      "--listen-peer-urls",
      HttpUrl(member.peer_port),
      "--initial-advertise-peer-urls",
      HttpUrl(member.peer_port),
      "--initial-cluster",
      initial_cluster_,
      "--initial-cluster-state",
      "new",
      "--initial-cluster-token",
      absl::StrCat("summon-test-", getpid()),
      "--logger",
      "zap",
      "--log-level",
      "warn",
  };
  if (options_.tls) {
    for (const std::string& arg :
         {std::string("--cert-file"), pki("server.crt"),
          std::string("--key-file"), pki("server.key"),
          std::string("--trusted-ca-file"), pki("ca.crt"),
          std::string("--client-cert-auth")}) {
      spec.argv.push_back(arg);
    }
  }
  if (options_.auth_token_ttl_s > 0) {
    spec.argv.push_back("--auth-token-ttl");
    spec.argv.push_back(absl::StrCat(options_.auth_token_ttl_s));
  }
  // Never the system's etcd settings (ETCD_* variables) in a test.
  spec.env = {{"ETCD_DATA_DIR", ""}, {"ETCD_NAME", ""}};
  spec.log_path = absl::StrCat(log_dir, "/etcd-", member.name, ".log");
  absl::StatusOr<ChildProcess> process = ChildProcess::Spawn(spec);
  if (!process.ok()) return process.status();
  member.process = std::move(*process);
  return absl::OkStatus();
}

std::string EtcdCluster::client_address(int member) const {
  return absl::StrCat("127.0.0.1:", members_[member].client_port);
}

std::vector<std::string> EtcdCluster::client_addresses() const {
  std::vector<std::string> addresses;
  for (int i = 0; i < members(); ++i) addresses.push_back(client_address(i));
  return addresses;
}

server::EtcdClient::Options EtcdCluster::client_options(
    absl::Duration call_timeout) const {
  server::EtcdClient::Options options;
  options.endpoints = client_addresses();
  options.call_timeout = call_timeout;
  if (options_.tls) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = ReadFile(pki("ca.crt")).value_or("");
    tls.pem_cert_chain = ReadFile(pki("alice.crt")).value_or("");
    tls.pem_private_key = ReadFile(pki("alice.key")).value_or("");
    options.credentials = grpc::SslCredentials(tls);
  }
  if (options_.auth) {
    options.user = kUser;
    options.password = password_;
  }
  return options;
}

std::vector<std::string> EtcdCluster::summond_flags() const {
  std::vector<std::string> flags;
  if (options_.tls) {
    flags.push_back("--coordinator-ca=" + pki("ca.crt"));
    flags.push_back("--coordinator-cert=" + pki("alice.crt"));
    flags.push_back("--coordinator-key=" + pki("alice.key"));
  }
  if (options_.auth) {
    flags.push_back(absl::StrCat("--coordinator-user=", kUser));
    flags.push_back("--coordinator-password-file=" + password_file());
  }
  return flags;
}

absl::Status EtcdCluster::EnableAuth() {
  password_ =
      absl::StrCat("pw-", getpid(), "-", absl::ToUnixNanos(absl::Now()));
  {
    std::ofstream out(password_file(), std::ios::trunc);
    out << password_ << "\n";
    if (!out.flush()) {
      return absl::UnavailableError("cannot write " + password_file());
    }
  }
  const server::EtcdClient::Options options = client_options(absl::Seconds(5));
  auto auth = etcdserverpb::Auth::NewStub(grpc::CreateChannel(
      client_address(0), options.credentials != nullptr
                             ? options.credentials
                             : grpc::InsecureChannelCredentials()));
  const auto context = [] {
    auto made = std::make_unique<grpc::ClientContext>();
    made->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return made;
  };
  // etcd enables authentication only once user root holds role root.
  for (const char* user : {"root", kUser}) {
    etcdserverpb::AuthUserAddRequest add;
    add.set_name(user);
    add.set_password(password_);
    etcdserverpb::AuthUserAddResponse added;
    if (absl::Status status =
            Checked(auth->UserAdd(context().get(), add, &added), "user add");
        !status.ok()) {
      return status;
    }
  }
  etcdserverpb::AuthRoleAddRequest role;
  role.set_name(kUser);
  etcdserverpb::AuthRoleGrantPermissionRequest grant;
  grant.set_name(kUser);
  grant.mutable_perm()->set_permtype(authpb::Permission::READWRITE);
  grant.mutable_perm()->set_key(kUserPrefix);
  grant.mutable_perm()->set_range_end(server::PrefixEnd(kUserPrefix));
  etcdserverpb::AuthUserGrantRoleRequest root_role;
  root_role.set_user("root");
  root_role.set_role("root");
  etcdserverpb::AuthUserGrantRoleRequest summon_role;
  summon_role.set_user(kUser);
  summon_role.set_role(kUser);
  etcdserverpb::AuthRoleAddResponse role_added;
  etcdserverpb::AuthRoleGrantPermissionResponse granted;
  etcdserverpb::AuthUserGrantRoleResponse role_granted;
  etcdserverpb::AuthEnableResponse enabled;
  const std::vector<std::pair<const char*, std::function<grpc::Status()>>>
      steps = {
          {"role add",
           [&] { return auth->RoleAdd(context().get(), role, &role_added); }},
          {"role grant permission",
           [&] {
             return auth->RoleGrantPermission(context().get(), grant, &granted);
           }},
          {"grant root",
           [&] {
             return auth->UserGrantRole(context().get(), root_role,
                                        &role_granted);
           }},
          {"grant summon",
           [&] {
             return auth->UserGrantRole(context().get(), summon_role,
                                        &role_granted);
           }},
          {"auth enable",
           [&] { return auth->AuthEnable(context().get(), {}, &enabled); }}};
  for (const auto& [what, step] : steps) {
    if (absl::Status status = Checked(step(), what); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status EtcdCluster::ChangePassword(const std::string& password) {
  const server::EtcdClient::Options options = client_options(absl::Seconds(5));
  auto auth = etcdserverpb::Auth::NewStub(grpc::CreateChannel(
      client_address(0), options.credentials != nullptr
                             ? options.credentials
                             : grpc::InsecureChannelCredentials()));
  grpc::ClientContext as_root;
  as_root.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  etcdserverpb::AuthenticateRequest login;
  login.set_name("root");
  login.set_password(password_);
  etcdserverpb::AuthenticateResponse token;
  if (absl::Status status =
          Checked(auth->Authenticate(&as_root, login, &token), "root login");
      !status.ok()) {
    return status;
  }
  grpc::ClientContext change_context;
  change_context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  change_context.AddMetadata("token", token.token());
  etcdserverpb::AuthUserChangePasswordRequest change;
  change.set_name(kUser);
  change.set_password(password);
  etcdserverpb::AuthUserChangePasswordResponse changed;
  return Checked(auth->UserChangePassword(&change_context, change, &changed),
                 "user change password");
}

absl::StatusOr<TcpProxy*> EtcdCluster::Proxy(int member) {
  Member& m = members_[member];
  if (m.proxy == nullptr) {
    absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
        TcpProxy::Start(m.client_port);
    if (!proxy.ok()) return proxy.status();
    m.proxy = std::move(*proxy);
  }
  return m.proxy.get();
}

bool EtcdCluster::running(int member) const {
  return members_[member].process.running();
}

absl::Status EtcdCluster::Kill(int member) {
  absl::StatusOr<ExitStatus> killed = members_[member].process.Kill();
  return killed.status();
}

absl::Status EtcdCluster::Restart(int member) {
  if (running(member)) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd member ", member, " is running"));
  }
  return Spawn(member);
}

absl::Status EtcdCluster::WaitHealthy(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (int i = 0; i < members(); ++i) {
    if (!running(i)) continue;
    server::EtcdClient::Options options = client_options();
    options.endpoints = {client_address(i)};
    // Before EnableAuth a token is neither needed nor to be had.
    if (password_.empty()) options.user.clear();
    server::EtcdClient client(options);
    etcdserverpb::RangeRequest health;
    // What `etcdctl endpoint health` reads; with authentication, a key user
    // summon's role reaches.
    health.set_key(options_.auth ? absl::StrCat(kUserPrefix, "health")
                                 : "health");
    while (true) {
      if (std::optional<ExitStatus> ended = members_[i].process.PollExit()) {
        return absl::UnavailableError(absl::StrCat(
            "etcd member ", i, " exited: ", ExitStatusText(*ended)));
      }
      absl::StatusOr<etcdserverpb::RangeResponse> read = client.Range(health);
      if (read.ok()) break;
      if (absl::Now() > deadline) {
        return absl::UnavailableError(absl::StrCat(
            "etcd member ", i, " is not healthy after ",
            absl::FormatDuration(timeout), ": ", read.status().ToString()));
      }
      absl::SleepFor(kPollInterval);
    }
  }
  return absl::OkStatus();
}

}  // namespace summon::tests
