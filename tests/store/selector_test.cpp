#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store/store.h"

namespace cnlab::store {
namespace {

using Op = Selector::Term::Op;

nlohmann::json object_with(nlohmann::json labels, nlohmann::json spec = nlohmann::json::object(),
                           nlohmann::json status = nlohmann::json::object()) {
  return {{"metadata", {{"name", "x"}, {"labels", std::move(labels)}}},
          {"spec", std::move(spec)},
          {"status", std::move(status)}};
}

Selector parsed(std::string_view labels, std::string_view fields = "") {
  auto selector = Selector::parse(labels, fields);
  EXPECT_TRUE(selector) << selector.error().to_string();
  return selector ? *selector : Selector{};
}

TEST(SelectorParse, ReadsEqualityInequalityAndExistenceLabelTerms) {
  Selector selector = parsed("app=web, tier!=db,gpu,zone==eu-1");
  ASSERT_EQ(selector.labels.size(), 4u);
  EXPECT_EQ(selector.labels[0].path, "app");
  EXPECT_EQ(selector.labels[0].value, "web");
  EXPECT_EQ(selector.labels[0].op, Op::kEq);
  EXPECT_EQ(selector.labels[1].path, "tier");
  EXPECT_EQ(selector.labels[1].op, Op::kNe);
  EXPECT_EQ(selector.labels[2].path, "gpu");
  EXPECT_EQ(selector.labels[2].op, Op::kExists);
  EXPECT_EQ(selector.labels[3].path, "zone");
  EXPECT_EQ(selector.labels[3].value, "eu-1");
  EXPECT_EQ(selector.labels[3].op, Op::kEq);
  EXPECT_TRUE(selector.fields.empty());
}

TEST(SelectorParse, ReadsDottedFieldPaths) {
  Selector selector = parsed("", "spec.node=gpu-1,status.phase!=Running");
  ASSERT_EQ(selector.fields.size(), 2u);
  EXPECT_EQ(selector.fields[0].path, "spec.node");
  EXPECT_EQ(selector.fields[0].value, "gpu-1");
  EXPECT_EQ(selector.fields[0].op, Op::kEq);
  EXPECT_EQ(selector.fields[1].path, "status.phase");
  EXPECT_EQ(selector.fields[1].op, Op::kNe);
}

TEST(SelectorParse, EmptyTextsGiveAnEmptySelectorThatMatchesEverything) {
  Selector selector = parsed("", "  ");
  EXPECT_TRUE(selector.empty());
  EXPECT_TRUE(selector.matches(nlohmann::json::array()));
}

TEST(SelectorParse, BadLabelTermIsNamedWithTheLabelSelectorField) {
  for (std::string_view bad : {"=web", "app=web,", "app in (web,db)", "!gpu", "a!b", "app=w b", "app=x=y"}) {
    auto selector = Selector::parse(bad, "");
    ASSERT_FALSE(selector) << bad;
    EXPECT_EQ(selector.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(selector.error().field, "labelSelector") << bad;
  }
  auto selector = Selector::parse("app=web,tier in (db)", "");
  ASSERT_FALSE(selector);
  EXPECT_EQ(selector.error().value, "tier in (db)");
  EXPECT_THAT(selector.error().message, testing::HasSubstr("key=value"));
}

TEST(SelectorParse, BadFieldTermIsNamedWithTheFieldSelectorField) {
  for (std::string_view bad : {"spec.node", "spec..node=x", ".spec=x", "spec.node=a,", "=x", "spec node=x"}) {
    auto selector = Selector::parse("", bad);
    ASSERT_FALSE(selector) << bad;
    EXPECT_EQ(selector.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(selector.error().field, "fieldSelector") << bad;
  }
  auto selector = Selector::parse("app=web", "status.phase=Running,spec.node");
  ASSERT_FALSE(selector);
  EXPECT_EQ(selector.error().value, "spec.node");
}

TEST(SelectorMatch, LabelsComeFromMetadataLabels) {
  auto web = object_with({{"app", "web"}, {"tier", "front"}});
  auto db = object_with({{"app", "db"}});
  EXPECT_TRUE(parsed("app=web").matches(web));
  EXPECT_FALSE(parsed("app=web").matches(db));
  EXPECT_TRUE(parsed("tier").matches(web));
  EXPECT_FALSE(parsed("tier").matches(db));
  EXPECT_TRUE(parsed("app=web,tier=front").matches(web));
  EXPECT_FALSE(parsed("app=web,tier=back").matches(web));
  // Labels elsewhere in the object do not count.
  EXPECT_FALSE(parsed("app").matches(nlohmann::json{{"app", "web"}}));
}

TEST(SelectorMatch, InequalityAlsoMatchesObjectsWithoutTheLabel) {
  EXPECT_TRUE(parsed("tier!=db").matches(object_with({{"app", "web"}})));
  EXPECT_TRUE(parsed("tier!=db").matches(nlohmann::json{{"spec", 1}}));
  EXPECT_FALSE(parsed("tier!=db").matches(object_with({{"tier", "db"}})));
}

TEST(SelectorMatch, FieldsCompareAsTextWithMissingFieldsAsEmpty) {
  auto job =
      object_with(nlohmann::json::object(), {{"node", "gpu-1"}, {"gpus", 2}, {"spot", true}}, {{"phase", "Running"}});
  EXPECT_TRUE(parsed("", "spec.node=gpu-1").matches(job));
  EXPECT_FALSE(parsed("", "spec.node=\"gpu-1\"").matches(job));
  EXPECT_TRUE(parsed("", "spec.gpus=2").matches(job));
  EXPECT_TRUE(parsed("", "spec.spot=true").matches(job));
  EXPECT_TRUE(parsed("", "status.phase!=Pending").matches(job));
  EXPECT_FALSE(parsed("", "status.phase!=Running").matches(job));
  EXPECT_TRUE(parsed("", "status.reason!=Evicted").matches(job));
  EXPECT_TRUE(parsed("", "status.reason=").matches(job));
  EXPECT_FALSE(parsed("", "spec.node.name=gpu-1").matches(job));
}

TEST(SelectorMatch, LabelAndFieldTermsMustAllHold) {
  auto job = object_with({{"team", "vision"}}, {{"node", "gpu-1"}});
  EXPECT_TRUE(parsed("team=vision", "spec.node=gpu-1").matches(job));
  EXPECT_FALSE(parsed("team=vision", "spec.node=gpu-2").matches(job));
  EXPECT_FALSE(parsed("team=nlp", "spec.node=gpu-1").matches(job));
}

}  // namespace
}  // namespace cnlab::store
