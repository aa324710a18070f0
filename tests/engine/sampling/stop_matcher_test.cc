#include "engine/sampling/stop_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mnemo::sampling {
namespace {

// Feeds `text` in pieces of `piece` bytes; returns the number of bytes fed when a stop
// matched, or -1.
int FirstMatchEnd(StopMatcher matcher, const std::string& text, size_t piece) {
  for (size_t pos = 0; pos < text.size(); pos += piece) {
    if (matcher.Feed(text.substr(pos, piece))) {
      return static_cast<int>(std::min(pos + piece, text.size()));
    }
  }
  return -1;
}

TEST(StopMatcherTest, MatchesAcrossTokenBoundaries) {
  StopMatcher matcher({"\n\nUser:"});
  EXPECT_EQ(FirstMatchEnd(matcher, "Hello there.\n\nUser: hi", 1), 19);
  EXPECT_EQ(FirstMatchEnd(matcher, "Hello there.\n\nUser: hi", 3), 21);  // ends in piece 7
  EXPECT_EQ(FirstMatchEnd(matcher, "Hello there.\n\nUser: hi", 100), 22);
  EXPECT_EQ(FirstMatchEnd(matcher, "Hello there.\nUser: hi", 1), -1);
}

TEST(StopMatcherTest, EarliestOfSeveralStops) {
  StopMatcher matcher({"END", "\xC3\xA9t\xC3\xA9", "x"});
  EXPECT_EQ(FirstMatchEnd(matcher, "en \xC3\xA9t\xC3\xA9 ENDx", 1), 8);
  EXPECT_EQ(FirstMatchEnd(matcher, "abc END", 1), 7);
  EXPECT_EQ(FirstMatchEnd(matcher, "abx", 1), 3);
}

TEST(StopMatcherTest, OverlappingPrefixes) {
  StopMatcher matcher({"aab"});
  EXPECT_EQ(FirstMatchEnd(matcher, "aaaab", 1), 5);
  EXPECT_EQ(FirstMatchEnd(matcher, "aaaab", 2), 5);
  EXPECT_EQ(FirstMatchEnd(matcher, "abab", 1), -1);
}

TEST(StopMatcherTest, OldMatchesAreNotReportedAgain) {
  StopMatcher matcher({"ab"});
  EXPECT_TRUE(matcher.Feed("xab"));
  EXPECT_FALSE(matcher.Feed("c"));
  EXPECT_FALSE(matcher.Feed(""));
  EXPECT_FALSE(matcher.Feed("a"));
  EXPECT_TRUE(matcher.Feed("b"));
}

TEST(StopMatcherTest, EmptyStopsNeverMatch) {
  StopMatcher matcher({"", ""});
  EXPECT_TRUE(matcher.empty());
  EXPECT_FALSE(matcher.Feed("anything"));
}

// Every split of a long text finds the first stop at the same place.
TEST(StopMatcherTest, AnySplitFindsTheSameFirstMatch) {
  const std::string text = "the quick brown fox jumps over the lazy dog";
  const std::vector<std::string> stops = {"lazy", "over t"};
  const int expected = static_cast<int>(text.find("over t") + 6);
  for (size_t piece = 1; piece <= 8; ++piece) {
    StopMatcher matcher(stops);
    int end = -1;
    for (size_t pos = 0; pos < text.size(); pos += piece) {
      if (matcher.Feed(text.substr(pos, piece))) {
        end = static_cast<int>(std::min(pos + piece, text.size()));
        break;
      }
    }
    EXPECT_GE(end, expected) << piece;
    EXPECT_LT(end, expected + static_cast<int>(piece)) << piece;
  }
}

}  // namespace
}  // namespace mnemo::sampling
