//===- StringLiteralTest.cpp - cppStringLiteral against the C++ compiler
//---===//
//
// Model names reach the emitted program only as literals made by
// cppStringLiteral.  The host compiler is the reference: every literal is
// compiled into a program that writes its bytes back, and they must equal the
// original text exactly (every byte value, escapes next to digits, '?' that
// could form a trigraph, UTF-8).
//
//===----------------------------------------------------------------------===//

#include "codegen/Emitter.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

using namespace sharc;

namespace {

TEST(StringLiteralTest, EveryByteRoundTripsThroughTheHostCompiler) {
  std::vector<std::string> texts;
  // Each byte value alone, then followed by every character that could
  // extend an escape (octal and hex digits, letters).
  for (int c = 1; c < 256; ++c) {
    texts.push_back(std::string(1, static_cast<char>(c)));
    texts.push_back(std::string(1, static_cast<char>(c)) + "0178aAfF9");
  }
  // Trigraph spellings, kept apart in the source so that no compiler reads
  // them as trigraphs here.
  texts.push_back("\n\t\x7f\"\\?" "?=?" "?/");
  texts.push_back("х_кириллица");
  texts.push_back("\"; system(\"x\"); //");
  texts.push_back("a\\x41\\101\\u0041");

  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("sharc-literal", dir));
  std::string cpp = (dir + "/literals.cpp").str();
  std::string exe = (dir + "/literals").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(cpp, ec);
    ASSERT_FALSE(ec);
    out << "#include <cstdio>\n#include <cstring>\n"
           "static const char *const texts[] = {\n";
    for (const std::string &text : texts)
      out << "  " << cppStringLiteral(text) << ",\n";
    out << "};\nstatic const unsigned long sizes[] = {\n";
    for (const std::string &text : texts)
      out << "  sizeof(" << cppStringLiteral(text) << ") - 1,\n";
    out << "};\nint main() {\n"
           "  for (unsigned long k = 0; k < sizeof(sizes) / sizeof(*sizes); "
           "++k) {\n"
           "    for (unsigned long i = 0; i < sizes[k]; ++i)\n"
           "      std::printf(\"%02x\", (unsigned char)texts[k][i]);\n"
           "    std::printf(\"\\n\");\n  }\n}\n";
  }
  std::string output = (dir + "/out.txt").str();
  std::string command = std::string(SHARC_TEST_CXX) + " -std=c++17 " + cpp +
                        " -o " + exe + " 2>&1 && " + exe + " > " + output;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(output);
  std::string line;
  for (const std::string &text : texts) {
    ASSERT_TRUE(std::getline(in, line));
    std::string expected;
    for (unsigned char c : text) {
      char hex[3];
      std::snprintf(hex, sizeof(hex), "%02x", c);
      expected += hex;
    }
    EXPECT_EQ(line, expected) << "literal " << cppStringLiteral(text);
  }
  llvm::sys::fs::remove_directories(dir);
}

} // namespace
