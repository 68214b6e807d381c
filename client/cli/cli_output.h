#ifndef SUMMON_CLIENT_CLI_CLI_OUTPUT_H_
#define SUMMON_CLIENT_CLI_CLI_OUTPUT_H_

#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "summon/v1/summon.pb.h"
#include "summon/v1/trainer.pb.h"

namespace summon::client {

// What summonctl prints for each response: `--output json` prints the
// response message as protobuf JSON (ToJson), `--output table` the
// human-readable text of the renderer below for its message type.

// Columns padded to their widest cell and separated by two spaces. A table
// without header has only rows (used for "key  value" blocks).
class Table {
 public:
  explicit Table(std::vector<std::string> header = {});
  void AddRow(std::vector<std::string> cells);
  std::string ToString() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// Canonical protobuf JSON (lowerCamelCase names, 64-bit integers as strings,
// fields at their defaults included), indented, ending in a newline.
std::string ToJson(const google::protobuf::Message& message);
// The same document as YAML (block style; strings double-quoted, so every
// value reads back exactly).
std::string ToYaml(const google::protobuf::Message& message);
// A JSON text as YAML.
std::string JsonToYaml(const std::string& json);

std::string ModelListTable(const v1::ListModelsResponse& response);
std::string ModelTable(const v1::Model& model);
std::string LoadModelTable(const v1::LoadModelResponse& response);
std::string SaveModelTable(const v1::SaveModelResponse& response);
std::string ChecksumTable(const v1::ModelChecksumResponse& response);
std::string DeleteModelTable(const v1::DeleteModelResponse& response);
// `session get`: the session's details, tensors and generations.
std::string SessionTable(const v1::Session& session);
// `session list` and `session renew`: one row per session.
std::string SessionListTable(const v1::ListSessionsResponse& response);
// An operator's view (session list --all): who holds each session, since
// when and how much of its lease is left at `now_unix_ms`.
std::string SessionHoldersTable(const v1::ListSessionsResponse& response,
                                int64_t now_unix_ms);
std::string CloseSessionTable(const v1::CloseSessionResponse& response);
std::string TensorInfoTable(const v1::TensorInfo& info);
// A tensor's row of the tables above: FQN, DTYPE, SHAPE, NUMEL.
std::vector<std::string> TensorInfoCells(const v1::TensorInfo& info);
std::string WriteTensorTable(const v1::WriteTensorResponse& response);
std::string TensorStatsTable(const v1::TensorStatsResponse& response);
std::string ReportPhaseTable(const v1::ReportPhaseResponse& response);

}  // namespace summon::client

#endif  // SUMMON_CLIENT_CLI_CLI_OUTPUT_H_
