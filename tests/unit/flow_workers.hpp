// The fixture of the flow-graph unit tests (flow_test.cpp, flow_graph_test.cpp): a Runtime of 1, 2 or 4
// workers per test.
#pragma once
#include <gtest/gtest.h>
#include <weft/weft.hpp>

#include "../common/test_util.hpp"

namespace wf = weft::flow;
using weft_test::opts;

class FlowWorkers : public ::testing::TestWithParam<unsigned> {
 protected:
  weft::Runtime rt{opts(GetParam())};
};
INSTANTIATE_TEST_SUITE_P(W, FlowWorkers, ::testing::Values(1u, 2u, 4u), weft_test::WorkersName{});
