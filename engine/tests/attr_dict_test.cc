#include <gtest/gtest.h>

#include "engine/attr_dict.h"
#include "engine/errors.h"

#include <ATen/ATen.h>

namespace zero3 {
namespace {

TEST(AttrDict, SetGetHasDelFollowPythonSemantics) {
  AttrDict d;
  EXPECT_FALSE(d.has("id"));
  d.set("id", 3);
  d.set("name", "expert");
  EXPECT_EQ(d.get("id"), AttrValue(int64_t{3}));
  d.set("id", 4);  // plain writes overwrite, like setattr
  EXPECT_EQ(d.get("id").as_int(), 4);
  EXPECT_EQ(d.size(), 2u);
  EXPECT_EQ(d.entries()[0].name, "id");  // insertion order survives an overwrite
  d.del("id");
  EXPECT_FALSE(d.has("id"));
  EXPECT_THROW(d.del("id"), AttributeError);
  EXPECT_THROW(d.get("id"), AttributeError);
}

TEST(AttrDict, DefineRefusesToOverwriteAndNamesBothOwners) {
  AttrDict d;
  d.set("id", 7);
  try {
    d.define("id", 99, "engine", "experts.3");
    FAIL() << "define overwrote a user attribute";
  } catch (const AttributeCollision& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("experts.3"), std::string::npos) << what;
    EXPECT_NE(what.find("'id'"), std::string::npos) << what;
    EXPECT_NE(what.find("user"), std::string::npos) << what;
    EXPECT_NE(what.find("engine"), std::string::npos) << what;
  }
  EXPECT_EQ(d.get("id").as_int(), 7);
  EXPECT_EQ(d.owner("id"), "user");
  d.define("ds_status", "AVAILABLE", "engine", "experts.3");
  EXPECT_EQ(d.owner("ds_status"), "engine");
}

TEST(AttrDict, NameRuleIsTheSameOnEveryPath) {
  AttrDict d;
  const std::string long_name(4096, 'x');
  for (const std::string& bad : {std::string(), long_name, std::string("a\0b", 3),
                                 std::string("\xff\xfe"), std::string("\xe2\x82")}) {
    EXPECT_THROW(d.set(bad, 1), AttributeError) << bad.size();
    EXPECT_THROW(d.define(bad, 1, "engine", "root"), AttributeError);
    EXPECT_FALSE(AttrDict::name_problem(bad).empty());
  }
  d.set("\xc3\xa9t\xc3\xa9", 1);  // UTF-8 names are fine
  d.set(std::string(AttrDict::kMaxNameBytes, 'y'), 2);
  EXPECT_EQ(d.size(), 2u);
}

TEST(AttrDict, ValuesCompareByContent) {
  EXPECT_EQ(AttrValue(at::ones({2, 3})), AttrValue(at::ones({2, 3})));
  EXPECT_NE(AttrValue(at::ones({2, 3})), AttrValue(at::zeros({2, 3})));
  EXPECT_NE(AttrValue(at::ones({6})), AttrValue(at::ones({2, 3})));
  EXPECT_NE(AttrValue(int64_t{1}), AttrValue(true));
  EXPECT_NE(AttrValue(int64_t{1}), AttrValue(1.0));
  EXPECT_EQ(AttrValue(AttrValue::List{1, "a", AttrValue()}),
            AttrValue(AttrValue::List{1, "a", AttrValue()}));
  EXPECT_NE(AttrValue(AttrValue::List{1}), AttrValue(AttrValue::List{2}));
  EXPECT_EQ(AttrValue().repr(), "None");
  EXPECT_THROW(AttrValue("x").as_int(), AttributeError);
}

TEST(AttrDict, DictEqualityIncludesOwnersAndOrder) {
  AttrDict a, b;
  a.set("x", 1);
  a.set("y", 2);
  b.set("y", 2);
  b.set("x", 1);
  EXPECT_FALSE(a == b);
  AttrDict c = a;
  EXPECT_TRUE(a == c);
  c.set("x", 1, "legacy-0.15.4");
  EXPECT_FALSE(a == c);
}

}  // namespace
}  // namespace zero3
