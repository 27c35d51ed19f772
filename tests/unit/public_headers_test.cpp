// The public headers bring nothing into a user's file but weft's own declarations and the standard library: no
// intrinsics header, no macro (a compile-time check: this file does not build otherwise).
#include <weft/weft.hpp>

#if defined(_IMMINTRIN_H_INCLUDED) || defined(__IMMINTRIN_H) || defined(_XMMINTRIN_H_INCLUDED)
#error "weft's public headers include an intrinsics header"
#endif
#if defined(WEFT_DEFINE_ACCESS_) || defined(WEFT_FLOW_PAUSE) || defined(WEFT_FLOW_MEMBER_PARAMS_) || \
    defined(WEFT_PAUSE) || defined(WEFT_ASSERT)
#error "weft's public headers leave a macro behind"
#endif

#include <gtest/gtest.h>

TEST(PublicHeaders, AccessClausesAreFunctions) {
  int x = 0;
  const int a[4] = {};
  constexpr auto (*in_object)(const int&) = &weft::in<int>;  // plain function templates: addressable
  EXPECT_EQ(in_object(x).address, &x);
  EXPECT_EQ(weft::weak_inout(a, 4).bytes, sizeof a);
  EXPECT_EQ(weft::commutative(x).mode, weft::AccessMode::commutative);
}
