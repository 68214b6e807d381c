#include "server/rpc/status_conversion.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace summon::server {
namespace {

// Every canonical code, checked against its published number so that a
// mapping by anything but number (or a shifted table) fails.
struct CodeCase {
  absl::StatusCode absl_code;
  grpc::StatusCode grpc_code;
  int number;
};

constexpr CodeCase kCodes[] = {
    {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED, 1},
    {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN, 2},
    {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT, 3},
    {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED,
     4},
    {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND, 5},
    {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS, 6},
    {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED,
     7},
    {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED,
     8},
    {absl::StatusCode::kFailedPrecondition,
     grpc::StatusCode::FAILED_PRECONDITION, 9},
    {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED, 10},
    {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE, 11},
    {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED, 12},
    {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL, 13},
    {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE, 14},
    {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS, 15},
    {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED, 16},
};

TEST(StatusConversionTest, ToGrpcStatusKeepsCodeNumberAndMessage) {
  for (const CodeCase& c : kCodes) {
    const std::string message = absl::StrCat("message for code ", c.number);
    const grpc::Status converted =
        ToGrpcStatus(absl::Status(c.absl_code, message));
    EXPECT_EQ(converted.error_code(), c.grpc_code) << "code " << c.number;
    EXPECT_EQ(static_cast<int>(converted.error_code()), c.number);
    EXPECT_EQ(converted.error_message(), message) << "code " << c.number;
  }
}

TEST(StatusConversionTest, FromGrpcStatusKeepsCodeNumberAndMessage) {
  for (const CodeCase& c : kCodes) {
    const std::string message = absl::StrCat("message for code ", c.number);
    const absl::Status converted =
        FromGrpcStatus(grpc::Status(c.grpc_code, message));
    EXPECT_EQ(converted.code(), c.absl_code) << "code " << c.number;
    EXPECT_EQ(converted.raw_code(), c.number);
    EXPECT_EQ(converted.message(), message) << "code " << c.number;
  }
}

TEST(StatusConversionTest, OkConvertsToOkBothWays) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(StatusConversionTest, RoundTripIsIdentity) {
  const absl::Status original =
      absl::FailedPreconditionError("rank 3 of model m is in FORWARD");
  EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(original)), original);
}

}  // namespace
}  // namespace summon::server
