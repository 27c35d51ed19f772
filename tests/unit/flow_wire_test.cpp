// How keys and values of flow graphs travel between processes (weft/detail/flow_wire.hpp), compiled without
// cereal (WEFT_FLOW_NO_CEREAL, as a program built where libcereal-dev is missing): a std::vector of a trivially
// copyable type still travels, as its elements' bytes; other standard containers do not.
#define WEFT_FLOW_NO_CEREAL 1
#include <weft/detail/flow_wire.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace weft::flow::detail;

static_assert(!WEFT_FLOW_CEREAL);
static_assert(transferable_v<std::vector<double>> && transferable_v<std::vector<std::int64_t>>);
static_assert(!transferable_v<std::vector<bool>>, "vector<bool> has no elements' bytes");
static_assert(!transferable_v<std::vector<std::string>> && !transferable_v<std::string>, "those need cereal");

TEST(FlowWire, VectorOfFixedElementsIsItsElementsBytes) {
  const std::vector<double> v{1.5, -2.25, 1e300, 0.0, 7.0};
  WireBytes out = "x";  // decoded below from one byte in: an unaligned payload
  Codec<std::vector<double>>::append(v, out);
  ASSERT_EQ(out.size(), 1 + v.size() * sizeof(double));
  const auto bytes = std::as_bytes(std::span<const char>(out)).subspan(1);
  EXPECT_EQ(Codec<std::vector<double>>::decode(bytes), v);
  EXPECT_EQ(Codec<std::vector<double>>::bytes(v).size(), v.size() * sizeof(double));
  EXPECT_TRUE(Codec<std::vector<double>>::decode({}).empty());
  EXPECT_THROW((void)Codec<std::vector<double>>::decode(bytes.first(7)), std::length_error);
}

TEST(FlowWire, VectorKeysRoundTrip) {
  const std::vector<std::vector<int>> keys{{}, {3}, {1, 2, 3, 4}};
  WireBytes header;
  for (const auto& k : keys) append_key(k, header);
  WireReader r(std::as_bytes(std::span<const char>(header)));
  for (const auto& k : keys) EXPECT_EQ(read_key<std::vector<int>>(r), k);
  EXPECT_EQ(r.left(), 0u);
}

}  // namespace
