#include "sim/generic_trace.h"

#include <gtest/gtest.h>

namespace cnlab::sim {
namespace {

Error job_error(const std::string& text) {
  auto jobs = parse_generic_jobs(text, "jobs.csv");
  EXPECT_FALSE(jobs) << "expected an error for: " << text;
  return jobs ? Error{} : jobs.error();
}

TEST(GenericTrace, ReadsRequiredAndOptionalColumns) {
  auto jobs = parse_generic_jobs(
      "submit_time,duration,num_gpus,gpu_share,model,project,class,deadline\n"
      "0,3600,1,0.25,h100,vision,batch,7200\n"
      "10.5,60,8,,,nlp,,\n",
      "jobs.csv");
  ASSERT_TRUE(jobs) << jobs.error().to_string();
  ASSERT_EQ(jobs->size(), 2u);
  const GenericJob& a = (*jobs)[0];
  EXPECT_EQ(a.line, 2);
  EXPECT_DOUBLE_EQ(a.submit_time, 0);
  EXPECT_DOUBLE_EQ(a.duration, 3600);
  EXPECT_EQ(a.num_gpus, 1);
  EXPECT_DOUBLE_EQ(a.gpu_share, 0.25);
  EXPECT_EQ(a.model, "h100");
  EXPECT_EQ(a.project, "vision");
  EXPECT_EQ(a.job_class, "batch");
  ASSERT_TRUE(a.deadline.has_value());
  EXPECT_DOUBLE_EQ(*a.deadline, 7200);
  const GenericJob& b = (*jobs)[1];
  EXPECT_DOUBLE_EQ(b.submit_time, 10.5);
  EXPECT_EQ(b.num_gpus, 8);
  EXPECT_DOUBLE_EQ(b.gpu_share, 1.0);
  EXPECT_FALSE(b.deadline.has_value());
}

TEST(GenericTrace, OptionalColumnsMayBeAbsent) {
  auto jobs = parse_generic_jobs("submit_time,duration,num_gpus\n5,10,2\n", "jobs.csv");
  ASSERT_TRUE(jobs) << jobs.error().to_string();
  EXPECT_EQ((*jobs)[0].num_gpus, 2);
  EXPECT_TRUE((*jobs)[0].model.empty());
}

TEST(GenericTrace, ShareMustBeAFractionOfOneGpu) {
  Error e = job_error("submit_time,duration,num_gpus,gpu_share\n0,1,1,1.5\n");
  EXPECT_EQ(e.field, "jobs.csv:2:gpu_share");
  EXPECT_EQ(e.value, "1.5");
  EXPECT_NE(e.message.find("0 < gpu_share <= 1"), std::string::npos);
  EXPECT_EQ(job_error("submit_time,duration,num_gpus,gpu_share\n0,1,1,0\n").field, "jobs.csv:2:gpu_share");
}

TEST(GenericTrace, ShareOnlyWithOneGpu) {
  Error e = job_error("submit_time,duration,num_gpus,gpu_share\n0,1,2,0.5\n");
  EXPECT_EQ(e.field, "jobs.csv:2:gpu_share");
  EXPECT_NE(e.message.find("num_gpus == 1"), std::string::npos);
}

TEST(GenericTrace, BadNumbersNameTheColumn) {
  EXPECT_EQ(job_error("submit_time,duration,num_gpus\n-1,1,1\n").field, "jobs.csv:2:submit_time");
  EXPECT_EQ(job_error("submit_time,duration,num_gpus\n0,0,1\n").field, "jobs.csv:2:duration");
  Error gpus = job_error("submit_time,duration,num_gpus\n0,1,two\n");
  EXPECT_EQ(gpus.field, "jobs.csv:2:num_gpus");
  EXPECT_EQ(gpus.value, "two");
  EXPECT_EQ(job_error("submit_time,duration,num_gpus,deadline\n100,1,1,50\n").field, "jobs.csv:2:deadline");
}

TEST(GenericTrace, HeaderAndWidthErrors) {
  Error unknown = job_error("submit_time,duration,num_gpus,priority\n");
  EXPECT_EQ(unknown.field, "jobs.csv:1:header");
  EXPECT_EQ(unknown.value, "priority");
  Error missing = job_error("submit_time,num_gpus\n");
  EXPECT_NE(missing.message.find("required column duration is missing"), std::string::npos);
  Error width = job_error("submit_time,duration,num_gpus\n0,1\n");
  EXPECT_EQ(width.field, "jobs.csv:2");
  EXPECT_EQ(width.value, "0,1");
}

}  // namespace
}  // namespace cnlab::sim
