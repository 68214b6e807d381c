// Weight sync on one in-process summond, with its shards in shared memory
// and (the _on_device variant) "on a device" (fake device memory: the
// device copy paths on a CPU): a published version reads back exactly
// (seeded init), boxes of every shape cross the uneven rank boundaries of
// kBlocksLayout, and a writeback after the publish changes the next version,
// never the published one.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/summond_fixture.h"

namespace summon::tests {
namespace {

struct Box {
  std::string fqn;
  std::vector<int64_t> shape;
  std::vector<std::pair<int64_t, int64_t>> box;
};

// Every parameter whole, and boxes that cut rows and columns.
const std::vector<Box>& Boxes() {
  static const auto* boxes = new std::vector<Box>{
      {"embed.w", {10, 4}, {{0, 10}, {0, 4}}},
      {"norm.w", {10}, {{0, 10}}},
      {"layers.0.attn.w", {5, 5}, {{0, 5}, {0, 5}}},
      {"layers.0.attn.b", {5}, {{0, 5}}},
      {"layers.0.mlp.w", {3, 5}, {{0, 3}, {0, 5}}},
      {"layers.1.w", {7, 5}, {{0, 7}, {0, 5}}},
      {"embed.w", {10, 4}, {{3, 4}, {0, 4}}},
      {"layers.1.w", {7, 5}, {{0, 7}, {2, 2}}},
      {"layers.0.attn.w", {5, 5}, {{1, 3}, {1, 3}}}};
  return *boxes;
}

std::vector<float> Cut(const Box& box, const std::vector<float>& values) {
  std::vector<float> out;
  const int64_t cols = box.shape.size() > 1 ? box.shape[1] : 1;
  const auto [r0, rn] = box.box[0];
  const auto [c0, cn] = box.box.size() > 1 ? box.box[1]
                                           : std::pair<int64_t, int64_t>{0, 1};
  for (int64_t r = r0; r < r0 + rn; ++r) {
    for (int64_t c = c0; c < c0 + cn; ++c) out.push_back(values[r * cols + c]);
  }
  return out;
}

class WeightSyncTest : public SummondTest {
 protected:
  grpc::Status Publish(const std::string& model, int64_t step) {
    grpc::ClientContext context;
    pb::PublishRequest request;
    request.set_model(model);
    request.set_step(step);
    pb::PublishResponse response;
    return summon_->Publish(&context, request, &response);
  }

  // Every box of version `version` equals the cut of `values`.
  void ExpectVersion(const std::string& model, int64_t version,
                     const TensorValues& values) {
    pb::ReadSlicesRequest request;
    request.set_model(model);
    request.set_version(version);
    for (const Box& box : Boxes()) {
      pb::SliceEntry* entry = request.add_entries();
      entry->set_fqn(box.fqn);
      for (const auto& [start, length] : box.box) {
        pb::SliceRange* range = entry->add_box();
        range->set_start(start);
        range->set_length(length);
      }
    }
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<pb::ReadSlicesResponse>> reader =
        summon_->ReadSlices(&context, request);
    pb::ReadSlicesResponse message;
    ASSERT_TRUE(reader->Read(&message));
    const pb::ReadSlicesResponse header = message;
    std::string packed;
    while (reader->Read(&message)) packed += message.data();
    const grpc::Status status = reader->Finish();
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(static_cast<int64_t>(packed.size()), header.total_bytes());
    ASSERT_EQ(header.entries_size(), static_cast<int>(Boxes().size()));
    for (size_t i = 0; i < Boxes().size(); ++i) {
      const pb::SliceLayout& layout = header.entries(static_cast<int>(i));
      EXPECT_EQ(layout.offset() % 16, 0);
      const std::vector<float> expected =
          Cut(Boxes()[i], values.at(Boxes()[i].fqn));
      ASSERT_EQ(layout.bytes(), static_cast<int64_t>(expected.size()) * 4);
      std::vector<float> got(expected.size());
      std::memcpy(got.data(), packed.data() + layout.offset(), layout.bytes());
      EXPECT_EQ(got, expected) << "entry " << i << " (" << Boxes()[i].fqn
                               << ") of version " << version;
    }
  }
};

TEST_F(WeightSyncTest, AVersionReadsExactlyAndNeverChanges) {
  StartServer(/*local_ranks=*/4);
  CreateSeeded("m");
  ASSERT_TRUE(Publish("m", 1).ok());
  ExpectVersion("m", 1, SeededBlocks());

  const pb::Session session = Open("m", ParamScope({"layers.1.w"}));
  const TensorValues seeded = SeededBlocks();
  TensorValues edited = seeded;
  edited["layers.1.w"] = Scaled(seeded.at("layers.1.w"), -3.0f);
  ASSERT_TRUE(WriteFloats(session.id(), "layers.1.w", edited["layers.1.w"]).ok());
  Close(session.id());
  ASSERT_TRUE(Publish("m", 2).ok());
  ExpectVersion("m", 1, seeded);
  ExpectVersion("m", 2, edited);
}

}  // namespace
}  // namespace summon::tests
