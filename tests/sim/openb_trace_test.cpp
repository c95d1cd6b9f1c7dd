#include "sim/openb_trace.h"

#include <gtest/gtest.h>

#include <fstream>

#include "temp_dir.h"

namespace cnlab::sim {
namespace {

constexpr const char* kPodHeader =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

Error pod_error(const std::string& rows) {
  auto pods = parse_openb_pods(std::string(kPodHeader) + rows, "pods.csv");
  EXPECT_FALSE(pods) << "expected an error for: " << rows;
  return pods ? Error{} : pods.error();
}

TEST(OpenbTrace, NodeListKeepsEveryColumn) {
  auto nodes = parse_openb_nodes("sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,P100\nn-1,32000,1024,0,\n",
                                 "nodes.csv");
  ASSERT_TRUE(nodes) << nodes.error().to_string();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].sn, "n-0");
  EXPECT_EQ((*nodes)[0].cpu_milli, 64000);
  EXPECT_EQ((*nodes)[0].memory_mib, 262144);
  EXPECT_EQ((*nodes)[0].gpu, 2);
  EXPECT_EQ((*nodes)[0].model, "P100");
  EXPECT_EQ((*nodes)[1].gpu, 0);
}

TEST(OpenbTrace, PodListKeepsEveryColumnAndDropsEmptySpecParts) {
  auto pods = parse_openb_pods(std::string(kPodHeader) +
                                   "p-0,6000,12288,1,460,|V100M16||V100M32|,LS,Running,10,20,12\n"
                                   "p-1,88000,1024,0,0,,BE,Pending,5,30,\n",
                               "pods.csv");
  ASSERT_TRUE(pods) << pods.error().to_string();
  ASSERT_EQ(pods->size(), 2u);
  const OpenbPod& p = (*pods)[0];
  EXPECT_EQ(p.name, "p-0");
  EXPECT_EQ(p.cpu_milli, 6000);
  EXPECT_EQ(p.memory_mib, 12288);
  EXPECT_EQ(p.num_gpu, 1);
  EXPECT_EQ(p.gpu_milli, 460);
  EXPECT_EQ(p.gpu_spec, (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_EQ(join_gpu_spec(p.gpu_spec), "V100M16|V100M32");
  EXPECT_EQ(p.qos, "LS");
  EXPECT_EQ(p.pod_phase, "Running");
  EXPECT_EQ(p.creation_time, 10);
  EXPECT_EQ(p.deletion_time, 20);
  EXPECT_EQ(p.scheduled_time, 12);
  EXPECT_FALSE((*pods)[1].scheduled_time.has_value());
  EXPECT_TRUE((*pods)[1].gpu_spec.empty());
}

TEST(OpenbTrace, PodListAcceptsTheFiveColumnFormOfMultigpu20AndCrlf) {
  auto pods = parse_openb_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\r\np-0,12000,16384,8,1000\r\n\r\n", "m.csv");
  ASSERT_TRUE(pods) << pods.error().to_string();
  ASSERT_EQ(pods->size(), 1u);
  EXPECT_EQ((*pods)[0].num_gpu, 8);
  EXPECT_TRUE((*pods)[0].qos.empty());
  EXPECT_FALSE((*pods)[0].creation_time.has_value());
}

TEST(OpenbTrace, GpuMilliOutOfRangeNamesFileLineColumnAndValue) {
  Error e = pod_error("p-0,1000,1,1,500,,LS,Running,0,1,0\np-1,1000,1,1,1001,,LS,Running,0,1,0\n");
  EXPECT_EQ(e.field, "pods.csv:3:gpu_milli");
  EXPECT_EQ(e.value, "1001");
  EXPECT_NE(e.message.find("gpu_milli must be a whole number 0..1000"), std::string::npos) << e.message;
}

TEST(OpenbTrace, NumGpuOutOfRangeSaysTheAllowedRange) {
  Error e = pod_error("p-0,1000,1,17,1000,,LS,Running,0,1,0\n");
  EXPECT_EQ(e.field, "pods.csv:2:num_gpu");
  EXPECT_EQ(e.value, "17");
  EXPECT_NE(e.message.find("num_gpu must be a whole number 0..16"), std::string::npos) << e.message;
}

TEST(OpenbTrace, NegativeCpuIsRejected) {
  Error e = pod_error("p-0,-5,1,0,0,,LS,Running,0,1,0\n");
  EXPECT_EQ(e.field, "pods.csv:2:cpu_milli");
  EXPECT_EQ(e.value, "-5");
  auto nodes = parse_openb_nodes("sn,cpu_milli,memory_mib,gpu,model\nn-0,-1,2,1,T4\n", "nodes.csv");
  ASSERT_FALSE(nodes);
  EXPECT_EQ(nodes.error().field, "nodes.csv:2:cpu_milli");
  EXPECT_EQ(nodes.error().value, "-1");
}

TEST(OpenbTrace, NonNumericValueIsRejected) {
  Error e = pod_error("p-0,1000,lots,0,0,,LS,Running,0,1,0\n");
  EXPECT_EQ(e.field, "pods.csv:2:memory_mib");
  EXPECT_EQ(e.value, "lots");
}

TEST(OpenbTrace, InconsistentGpuFieldsAreRejected) {
  EXPECT_EQ(pod_error("p-0,1000,1,0,500,,LS,Running,0,1,0\n").field, "pods.csv:2:gpu_milli");
  EXPECT_EQ(pod_error("p-0,1000,1,1,0,,LS,Running,0,1,0\n").field, "pods.csv:2:gpu_milli");
  Error multi = pod_error("p-0,1000,1,2,500,,LS,Running,0,1,0\n");
  EXPECT_EQ(multi.field, "pods.csv:2:gpu_milli");
  EXPECT_NE(multi.message.find("1000 when num_gpu > 1"), std::string::npos);
}

TEST(OpenbTrace, WrongNumberOfColumnsQuotesTheRow) {
  Error e = pod_error("p-0,1000,1,1,500,,LS\n");
  EXPECT_EQ(e.field, "pods.csv:2");
  EXPECT_EQ(e.value, "p-0,1000,1,1,500,,LS");
  EXPECT_NE(e.message.find("row has 7 columns but the header has 11"), std::string::npos) << e.message;
}

TEST(OpenbTrace, UnknownHeaderColumnListsTheAllowedOnes) {
  auto pods = parse_openb_pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli,colour\n", "pods.csv");
  ASSERT_FALSE(pods);
  EXPECT_EQ(pods.error().field, "pods.csv:1:header");
  EXPECT_EQ(pods.error().value, "colour");
  EXPECT_NE(pods.error().message.find("allowed columns: name,cpu_milli"), std::string::npos);
}

TEST(OpenbTrace, MissingRequiredColumnAndEmptyFileAreRejected) {
  auto missing = parse_openb_nodes("sn,cpu_milli,gpu,model\n", "nodes.csv");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("required column memory_mib is missing"), std::string::npos);
  auto empty = parse_openb_nodes("", "nodes.csv");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().field, "nodes.csv:1:header");
}

TEST(OpenbTrace, NodeErrorsCoverModelGpuCountAndDuplicates) {
  auto no_model = parse_openb_nodes("sn,cpu_milli,memory_mib,gpu,model\nn-0,1,2,2,\n", "nodes.csv");
  ASSERT_FALSE(no_model);
  EXPECT_EQ(no_model.error().field, "nodes.csv:2:model");
  auto too_many = parse_openb_nodes("sn,cpu_milli,memory_mib,gpu,model\nn-0,1,2,99,T4\n", "nodes.csv");
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error().field, "nodes.csv:2:gpu");
  EXPECT_EQ(too_many.error().value, "99");
  auto twice = parse_openb_nodes("sn,cpu_milli,memory_mib,gpu,model\nn-0,1,2,1,T4\nn-0,1,2,1,T4\n", "nodes.csv");
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().field, "nodes.csv:3:sn");
}

TEST(OpenbTrace, BadTimeIsRejected) {
  Error e = pod_error("p-0,1000,1,0,0,,LS,Running,yesterday,1,0\n");
  EXPECT_EQ(e.field, "pods.csv:2:creation_time");
  EXPECT_EQ(e.value, "yesterday");
}

TEST(OpenbTrace, MissingFileNamesThePath) {
  auto pods = load_openb_pods("/nonexistent/dir/pods.csv");
  ASSERT_FALSE(pods);
  EXPECT_EQ(pods.error().field, "/nonexistent/dir/pods.csv");
}

TEST(OpenbTrace, LoadsFromDiskWithThePathInErrors) {
  test_support::TempDir dir;
  std::string path = dir.file("nodes.csv");
  std::ofstream(path) << "sn,cpu_milli,memory_mib,gpu,model\nn-0,1,2,x,T4\n";
  auto nodes = load_openb_nodes(path);
  ASSERT_FALSE(nodes);
  EXPECT_EQ(nodes.error().field, path + ":2:gpu");
  EXPECT_EQ(nodes.error().value, "x");
}

}  // namespace
}  // namespace cnlab::sim
