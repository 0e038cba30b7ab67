//===- MetricsTest.cpp - Metrics lines, monitors and event files ----------===//
//
// runtime/Metrics.h and runtime/TensorBoard.h: the JSON line of a step, the
// float text of DeepSpeed's CSV files (Python's repr), CRC-32C against its
// published check value, TFRecord framing, and the files the monitors make.
// TensorBoard's own reader reads the event files in the end-to-end tests
// (test/e2e/test_deepspeed.py).
//
//===----------------------------------------------------------------------===//

#include "runtime/Metrics.h"
#include "runtime/TensorBoard.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

using namespace sharc::rt;
namespace fs = std::filesystem;

namespace {

class MetricsTest : public testing::Test {
protected:
  /// A fresh directory of this test's own (mkdtemp), removed at the end.
  void SetUp() override {
    std::string pattern =
        (fs::temp_directory_path() / "sharc-metrics-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir = pattern;
  }
  void TearDown() override { fs::remove_all(dir); }

  static std::string readBytes(const fs::path &file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::vector<fs::path> files(const fs::path &folder) const {
    std::vector<fs::path> found;
    for (const auto &entry : fs::directory_iterator(folder))
      found.push_back(entry.path());
    return found;
  }

  fs::path dir;
};

uint32_t littleEndian32(const std::string &bytes, size_t at) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i)
    value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return value;
}

TEST(Crc32c, PublishedCheckValues) {
  // The CRC catalogue's check value of CRC-32/ISCSI (CRC-32C) and RFC 3720's
  // (iSCSI) example of 32 zero bytes.
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(TfRecord, Framing) {
  std::string payload = "an event";
  std::string record = tfRecord(payload);
  ASSERT_EQ(record.size(), 8 + 4 + payload.size() + 4);
  // The length, little endian, and the masked CRCs of it and the payload.
  EXPECT_EQ(littleEndian32(record, 0), payload.size());
  EXPECT_EQ(littleEndian32(record, 4), 0u);
  uint32_t crc = crc32c(record.data(), 8);
  EXPECT_EQ(littleEndian32(record, 8),
            ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  EXPECT_EQ(record.substr(12, payload.size()), payload);
  EXPECT_EQ(littleEndian32(record, 12 + payload.size()),
            maskedCrc32c(payload.data(), payload.size()));
}

TEST(MetricsLine, HasTheGradientNormWhereThereIsOne) {
  StepMetrics metrics;
  metrics.step = 3;
  metrics.loss = 2.5;
  metrics.lr = 0.001;
  metrics.throughputKey = "tokens_per_s";
  metrics.throughput = 100;
  std::string line = metricsLine(metrics, 1.5);
  EXPECT_EQ(line.find("grad_norm"), std::string::npos) << line;
  metrics.gradNorm = 1.25;
  line = metricsLine(metrics, 1.5);
  EXPECT_NE(line.find("\"lr\": 0.001, \"grad_norm\": 1.25, "),
            std::string::npos)
      << line;
  // A skipped step's infinite norm is JSON's null.
  metrics.gradNorm = std::numeric_limits<double>::infinity();
  line = metricsLine(metrics, 1.5);
  EXPECT_NE(line.find("\"grad_norm\": null"), std::string::npos) << line;
  EXPECT_EQ(line.back(), '\n');
}

TEST(PythonFloatText, AsPythonsRepr) {
  EXPECT_EQ(pythonFloatText(0.003), "0.003");
  EXPECT_EQ(pythonFloatText(65536.0), "65536.0");
  EXPECT_EQ(pythonFloatText(1e-05), "1e-05");
  EXPECT_EQ(pythonFloatText(0.0001), "0.0001");
  EXPECT_EQ(pythonFloatText(1.5e16), "1.5e+16");
  EXPECT_EQ(pythonFloatText(-2.25), "-2.25");
  EXPECT_EQ(pythonFloatText(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(pythonFloatText(std::nan("")), "nan");
}

TEST_F(MetricsTest, TensorBoardMonitorsMakeFilesOfTheirOwn) {
  fs::path folder = dir / "runs" / "job";
  TensorBoardMonitor first, second;
  std::string error;
  ASSERT_TRUE(first.open(folder.string(), error)) << error;
  ASSERT_TRUE(second.open(folder.string(), error)) << error;
  EXPECT_NE(first.path(), second.path());
  EXPECT_EQ(files(folder).size(), 2u);
  EXPECT_EQ(fs::path(first.path())
                .filename()
                .string()
                .rfind("events.out.tfevents.", 0),
            0u);
  ASSERT_TRUE(first.write("Train/Samples/lr", 0.0, 16, error)) << error;
  ASSERT_TRUE(first.sync(error)) << error;
  // Two whole records: the file version and the scalar.
  std::string bytes = readBytes(first.path());
  size_t offset = 0;
  int records = 0;
  while (offset + 12 <= bytes.size()) {
    uint32_t length = littleEndian32(bytes, offset);
    ASSERT_LE(offset + 16 + length, bytes.size());
    EXPECT_EQ(littleEndian32(bytes, offset + 12 + length),
              maskedCrc32c(bytes.data() + offset + 12, length));
    offset += 16 + length;
    ++records;
  }
  EXPECT_EQ(offset, bytes.size());
  EXPECT_EQ(records, 2);
}

TEST_F(MetricsTest, StepLogNamesWhatFailed) {
  // A symbolic link as the metrics file is refused, naming the flag; the
  // link's target is untouched.
  fs::path target = dir / "target.jsonl";
  std::ofstream(target) << "kept\n";
  fs::path link = dir / "link.jsonl";
  fs::create_symlink(target, link);
  StepLog log;
  std::string error;
  EXPECT_FALSE(log.open(link.string(), "", "", error));
  EXPECT_EQ(error.rfind("--metrics: " + link.string(), 0), 0u) << error;
  EXPECT_EQ(readBytes(target), "kept\n");
  // A monitor folder that is a file.
  fs::path file = dir / "a-file";
  std::ofstream(file) << "x";
  StepLog other;
  EXPECT_FALSE(other.open("", "", (file / "job").string(), error));
  EXPECT_EQ(error.rfind("tensorboard: ", 0), 0u) << error;
}

TEST_F(MetricsTest, StepLogWritesEveryMonitor) {
  StepLog log;
  std::string error;
  fs::path csv = dir / "csv", events = dir / "tb";
  ASSERT_TRUE(log.open((dir / "m.jsonl").string(), csv.string(),
                       events.string(), error))
      << error;
  for (int64_t step = 1; step <= 2; ++step) {
    StepMetrics metrics;
    metrics.step = step;
    metrics.loss = 3.0 / double(step);
    metrics.lr = 0.5;
    metrics.gradNorm = 2.0;
    metrics.throughput = 10;
    ASSERT_TRUE(log.record(metrics, 8, error)) << error;
  }
  ASSERT_TRUE(log.sync(error)) << error;
  // DeepSpeed's lr row of step 1 (written by step 2) and sharc's events.
  EXPECT_EQ(readBytes(csv / "Train_Samples_lr.csv"), "step,lr\r\n8,0.5\r\n");
  EXPECT_EQ(readBytes(csv / "Train_Samples_grad_norm.csv"),
            "step,grad_norm\r\n8,2.0\r\n16,2.0\r\n");
  EXPECT_EQ(readBytes(csv / "Train_Samples_train_loss.csv"),
            "step,train_loss\r\n8,3.0\r\n16,1.5\r\n");
  EXPECT_TRUE(fs::exists(csv / "Train_Samples_samples_per_s.csv"));
  EXPECT_EQ(files(events).size(), 1u);
  std::string lines = readBytes(dir / "m.jsonl");
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 2);
}

} // namespace
