#ifndef SUMMON_TESTS_INTEGRATION_BAD_INPUT_FIXTURE_H_
#define SUMMON_TESTS_INTEGRATION_BAD_INPUT_FIXTURE_H_

// A daemon with model "m" (kBlocksLayout, seeded), a writable session on
// layers.1 and a read-only one on layers.0, plus helpers to fire malformed
// calls and raw WriteTensor streams at it.

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {

using ::grpc::StatusCode;

struct BadCall {
  std::string name;
  StatusCode code;
  std::function<grpc::Status()> call;
};

class BadInputTest : public SummondTest {
 protected:
  void SetUp() override {
    StartServer(4);
    CreateSeeded("m");
    writer_ = Open("m", ModuleScope("layers.1"));
    reader_ = Open("m", ReadOnly(ModuleScope("layers.0")));
  }

  // Runs `calls` in order, each expected to fail with its code.
  void ExpectAll(const std::vector<BadCall>& calls,
                 const std::function<void()>& after_each = nullptr) {
    for (const BadCall& bad : calls) {
      const grpc::Status status = bad.call();
      EXPECT_EQ(status.error_code(), bad.code)
          << bad.name << ": got " << status.error_code() << " "
          << status.error_message();
      if (bad.code != StatusCode::RESOURCE_EXHAUSTED) {
        EXPECT_FALSE(status.error_message().empty()) << bad.name;
      }
      if (after_each) after_each();
    }
  }

  template <typename Request, typename Response, typename Method>
  std::function<grpc::Status()> Unary(Method method, Request request) {
    return [this, method, request] {
      Response response;
      grpc::ClientContext context;
      return (summon_.get()->*method)(&context, request, &response);
    };
  }

  std::function<grpc::Status()> OpenCall(const std::string& model,
                                         const pb::SessionOptions& options) {
    return [this, model, options] {
      pb::Session session;
      return TryOpen(model, options, &session);
    };
  }

  std::function<grpc::Status()> ReadCall(pb::ReadTensorRequest request) {
    return [this, request] {
      std::string data;
      return ReadRaw(request, &data);
    };
  }

  // A WriteTensor stream of exactly these messages.
  grpc::Status WriteMessages(
      const std::vector<pb::WriteTensorRequest>& messages) {
    grpc::ClientContext context;
    pb::WriteTensorResponse response;
    auto writer = summon_->WriteTensor(&context, &response);
    for (const pb::WriteTensorRequest& message : messages) {
      if (!writer->Write(message)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // A header for layers.1.w of writer_; `count` < 0 leaves the count unset.
  pb::WriteTensorRequest Header(int64_t count, int64_t offset = 0) {
    pb::WriteTensorRequest message;
    pb::WriteTensorHeader* header = message.mutable_header();
    header->set_session_id(writer_.id());
    header->set_fqn("layers.1.w");
    header->set_dtype(pb::DTYPE_FLOAT32);
    header->set_element_offset(offset);
    if (count >= 0) header->set_element_count(count);
    return message;
  }

  static pb::WriteTensorRequest Data(const std::string& bytes) {
    pb::WriteTensorRequest message;
    message.set_data(bytes);
    return message;
  }

  pb::ReadTensorRequest ReadOf(const std::string& fqn) {
    pb::ReadTensorRequest request;
    request.set_session_id(writer_.id());
    request.set_fqn(fqn);
    return request;
  }

  pb::Session writer_;
  pb::Session reader_;
};

}  // namespace summon::tests

#endif  // SUMMON_TESTS_INTEGRATION_BAD_INPUT_FIXTURE_H_
