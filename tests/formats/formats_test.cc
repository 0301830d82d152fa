// Checkpoint formats and config parsing: safetensors writer/reader (single and
// sharded), dtype conversions, GGUF metadata of the real stories260K model, HF
// configs.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "base/block_quant.h"
#include "base/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "formats/block_file.h"
#include "model/checkpoint.h"
#include "formats/config.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/mapped_file.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "formats/text_corpus.h"
#include "nlohmann/json.hpp"
#include "tests/test_paths.h"

namespace lrkv {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TensorView View(const std::string& name, DType dtype,
                std::vector<int64_t> shape, const std::vector<uint8_t>& bytes) {
  TensorView v;
  v.name = name;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.data = bytes.data();
  v.nbytes = bytes.size();
  return v;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

void WriteText(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

// Every tensor of `in` is in `reader` with its dtype, shape and bytes.
void ExpectReadBack(const SafetensorsReader& reader,
                    const std::vector<TensorView>& in) {
  for (const auto& t : in) {
    const TensorView* got = reader.Find(t.name);
    ASSERT_NE(got, nullptr) << t.name;
    EXPECT_EQ(got->dtype, t.dtype);
    EXPECT_EQ(got->shape, t.shape);
    ASSERT_EQ(got->nbytes, t.nbytes);
    if (t.nbytes > 0)
      EXPECT_EQ(std::memcmp(got->data, t.data, t.nbytes), 0) << t.name;
  }
}

TEST(Safetensors, WriteThenReadIsBitExact) {
  const fs::path dir = testing::FreshTempDir("st_roundtrip");
  const auto a = RandomBytes(3 * 5 * 4, 1), b = RandomBytes(7 * 2, 2),
             c = RandomBytes(0, 3);
  const std::vector<TensorView> in = {View("a", DType::kF32, {3, 5}, a),
                                      View("b", DType::kBF16, {7}, b),
                                      View("empty", DType::kF16, {0, 4}, c)};
  ASSERT_TRUE(
      WriteSafetensors((dir / "x.safetensors").string(), in, {{"k", "v"}})
          .ok());
  // The header is padded so that the data starts on a 64-byte line (the
  // reference writer pads to 8; any multiple of 8 reads there too).
  std::ifstream f(dir / "x.safetensors", std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 64, 0u);
  auto reader = SafetensorsReader::Open((dir / "x.safetensors").string());
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->metadata().at("k"), "v");
  ASSERT_EQ((*reader)->tensors().size(), 3u);
  ExpectReadBack(**reader, in);
}

TEST(Safetensors, WriterRejectsDuplicateAndMismatchedTensors) {
  const fs::path dir = testing::FreshTempDir("st_writer_bad");
  const auto a = RandomBytes(8, 1);
  auto dup = WriteSafetensors(
      (dir / "d.safetensors").string(),
      {View("a", DType::kF32, {2}, a), View("a", DType::kF32, {2}, a)}, {});
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  auto bad = WriteSafetensors((dir / "b.safetensors").string(),
                              {View("a", DType::kF32, {3}, a)}, {});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir / "b.safetensors"));
}

TEST(Safetensors, ShardedCheckpointThroughIndex) {
  const fs::path dir = testing::FreshTempDir("st_sharded");
  const auto a = RandomBytes(16, 4), b = RandomBytes(8, 5);
  ASSERT_TRUE(
      WriteSafetensors((dir / "model-00001-of-00002.safetensors").string(),
                       {View("a", DType::kF32, {4}, a)}, {})
          .ok());
  ASSERT_TRUE(
      WriteSafetensors((dir / "model-00002-of-00002.safetensors").string(),
                       {View("b", DType::kF16, {4}, b)}, {})
          .ok());
  WriteText(dir / "model.safetensors.index.json",
            R"({"metadata": {"total_size": 24}, "weight_map": {
                "a": "model-00001-of-00002.safetensors",
                "b": "model-00002-of-00002.safetensors"}})");
  auto reader = SafetensorsReader::Open(dir.string());
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_NE((*reader)->Find("a"), nullptr);
  ASSERT_NE((*reader)->Find("b"), nullptr);
  EXPECT_EQ(std::memcmp((*reader)->Find("b")->data, b.data(), 8), 0);
}

// The streaming writer splits where Hugging Face's rule does (a tensor that
// would push a non-empty shard past the limit opens the next one; one larger
// than the limit gets a shard of its own), names the shards
// model-0000i-of-0000N, and the index maps every tensor; the reader then sees
// exactly the bytes written.
TEST(Safetensors, StreamingWriterShardsAndTheReaderReadsThemBack) {
  const fs::path dir = testing::FreshTempDir("st_stream");
  const auto a = RandomBytes(40, 1), b = RandomBytes(40, 2),
             c = RandomBytes(120, 3), d = RandomBytes(8, 4);
  const std::vector<TensorView> in = {
      View("a", DType::kF32, {10}, a), View("b", DType::kBF16, {20}, b),
      View("big", DType::kF16, {60}, c), View("d", DType::kF32, {2}, d)};
  std::vector<TensorSpec> specs;
  for (const auto& t : in) specs.push_back({t.name, t.dtype, t.shape});
  SafetensorsShardOptions options;
  options.max_shard_bytes = 100;  // a+b = 80 fit; big (120) alone; d after it
  auto writer =
      SafetensorsCheckpointWriter::Create(dir.string(), specs, options);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_THAT((*writer)->shard_files(),
              ::testing::ElementsAre("model-00001-of-00003.safetensors",
                                     "model-00002-of-00003.safetensors",
                                     "model-00003-of-00003.safetensors"));
  // Out of order or wrongly sized writes are refused.
  EXPECT_EQ((*writer)->Write("b", b.data(), b.size()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*writer)->Write("a", a.data(), 8).code(),
            absl::StatusCode::kInvalidArgument);
  for (const auto& t : in)
    ASSERT_TRUE((*writer)->Write(t.name, t.data, t.nbytes).ok()) << t.name;
  ASSERT_TRUE((*writer)->Finish().ok());
  std::ifstream index_file(dir / kSafetensorsIndexFileName);
  const auto index = nlohmann::json::parse(index_file);
  EXPECT_EQ(index["metadata"]["total_size"], 208);
  EXPECT_EQ(index["weight_map"]["b"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["d"], "model-00003-of-00003.safetensors");
  auto reader = SafetensorsReader::Open(dir.string());
  ASSERT_TRUE(reader.ok()) << reader.status();
  ExpectReadBack(**reader, in);
  // Under the limit: one model.safetensors and no index.
  const fs::path one = testing::FreshTempDir("st_stream_one");
  auto single = SafetensorsCheckpointWriter::Create(one.string(), specs);
  ASSERT_TRUE(single.ok());
  EXPECT_THAT((*single)->shard_files(),
              ::testing::ElementsAre("model.safetensors"));
  for (const auto& t : in)
    ASSERT_TRUE((*single)->Write(t.name, t.data, t.nbytes).ok());
  ASSERT_TRUE((*single)->Finish().ok());
  EXPECT_FALSE(fs::exists(one / kSafetensorsIndexFileName));
  EXPECT_TRUE(SafetensorsReader::Open(one.string()).ok());
}

// Pieces around the block size (empty, one byte, a block less and more one)
// land in order: the buffer's whole-block writes neither drop nor repeat a
// byte.
TEST(BlockFile, PiecesAcrossBlockBoundariesLandInOrder) {
  const fs::path path = testing::FreshTempDir("block_file") / "f.bin";
  constexpr size_t kBlock = BlockFile::kBlockBytes;
  const std::vector<size_t> sizes = {0,          1, kBlock - 1, 3,
                                     kBlock + 5, 0, 2 * kBlock, 7};
  std::mt19937 rng(3);
  std::vector<uint8_t> expected;
  auto file = BlockFile::Create(path.string());
  ASSERT_TRUE(file.ok()) << file.status();
  for (size_t n : sizes) {
    std::vector<uint8_t> piece(n);
    for (auto& b : piece) b = static_cast<uint8_t>(rng());
    ASSERT_TRUE((*file)->Write(piece.data(), n).ok());
    expected.insert(expected.end(), piece.begin(), piece.end());
  }
  EXPECT_FALSE(fs::exists(path));  // only <path>.tmp until Commit()
  ASSERT_TRUE((*file)->Commit().ok());
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
  EXPECT_EQ((*file)->Commit().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*file)->Write(sizes.data(), 1).code(),
            absl::StatusCode::kFailedPrecondition);
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> got((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected);

  const auto missing =
      BlockFile::Create((path.parent_path() / "no" / "f.bin").string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot create"));

  // Dropped without a Commit(): nothing is left, neither file nor temporary.
  const fs::path dropped = path.parent_path() / "dropped.bin";
  {
    auto d = BlockFile::Create(dropped.string());
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE((*d)->Write(sizes.data(), 8).ok());
  }
  EXPECT_FALSE(fs::exists(dropped));
  EXPECT_FALSE(fs::exists(dropped.string() + ".tmp"));
}

// Tensors written from a live map (a source checkpoint's) read back whole, and
// what follows them lands after them, not over them.
TEST(Safetensors, TensorsFromAMappedSourceAreWrittenAndWhatFollowsLandsAfter) {
  const fs::path src = testing::FreshTempDir("st_mapped_src");
  const auto a = RandomBytes(4000, 5), b = RandomBytes(64, 6);
  {
    auto w = SafetensorsCheckpointWriter::Create(
        src.string(), {{"a", DType::kF32, {1000}}, {"b", DType::kF32, {16}}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write("a", a.data(), a.size()).ok());
    ASSERT_TRUE((*w)->Write("b", b.data(), b.size()).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  const fs::path dir = testing::FreshTempDir("st_mapped_dst");
  {
    auto source = SafetensorsReader::Open(src.string());
    ASSERT_TRUE(source.ok()) << source.status();
    const TensorView* ma = (*source)->Find("a");
    const TensorView* mb = (*source)->Find("b");
    ASSERT_NE(ma, nullptr);
    ASSERT_NE(mb, nullptr);
    const auto c = RandomBytes(24, 7);
    const std::vector<TensorView> in = {View("b", DType::kF32, {16}, b),
                                        View("a", DType::kF32, {1000}, a),
                                        View("c", DType::kF32, {6}, c)};
    auto w = SafetensorsCheckpointWriter::Create(dir.string(),
                                                 {{"b", DType::kF32, {16}},
                                                  {"a", DType::kF32, {1000}},
                                                  {"c", DType::kF32, {6}}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write("b", mb->data, mb->nbytes).ok());
    ASSERT_TRUE((*w)->Write("a", ma->data, ma->nbytes).ok());
    ASSERT_TRUE((*w)->Write("c", c.data(), c.size()).ok());
    ASSERT_TRUE((*w)->Finish().ok());
    auto reader = SafetensorsReader::Open(dir.string());
    ASSERT_TRUE(reader.ok()) << reader.status();
    ExpectReadBack(**reader, in);
  }
}

// A writer abandoned part-way (a failed conversion) leaves its finished shards,
// no index and no temporary file; finishing early is refused.
TEST(Safetensors, AnUnfinishedWriterLeavesNoIndexAndNoTemporary) {
  const fs::path dir = testing::FreshTempDir("st_stream_partial");
  const auto a = RandomBytes(40, 1);
  {
    auto writer = SafetensorsCheckpointWriter::Create(
        dir.string(), {{"a", DType::kF32, {10}}, {"b", DType::kF32, {10}}},
        {/*max=*/40, {}});
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Write("a", a.data(), a.size()).ok());
    EXPECT_EQ((*writer)->Finish().code(),
              absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(
        (*writer)->Write("b", a.data(), a.size()).ok());  // shard 2 open
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir))
    left.push_back(e.path().filename().string());
  EXPECT_THAT(left, ::testing::ElementsAre("model-00001-of-00002.safetensors"));
  EXPECT_EQ(
      SafetensorsCheckpointWriter::Create(
          dir.string(), {{"a", DType::kF32, {1}}, {"a", DType::kF32, {1}}})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(Safetensors, ShardedIndexErrorsNameTheProblem) {
  const fs::path dir = testing::FreshTempDir("st_sharded_bad");
  const auto a = RandomBytes(16, 4);
  ASSERT_TRUE(WriteSafetensors((dir / "s1.safetensors").string(),
                               {View("a", DType::kF32, {4}, a)}, {})
                  .ok());
  const std::string index = (dir / "model.safetensors.index.json").string();
  struct Case {
    std::string json, phrase;
  } cases[] = {
      {R"({"weight_map": {"a": "../s1.safetensors"}})", "plain file name"},
      {R"({"weight_map": {"a": "s1.safetensors", "zz": "s1.safetensors"}})",
       "'zz' is missing"},
      {R"({"weight_map": {"b": "s1.safetensors"}})",
       "not mapped to this shard"},
      {R"({"nothing": 1})", "no weight_map"},
      {R"({"weight_map": {"a": "s1.safetensors", "a": "s1.safetensors"}})",
       "duplicate"},
  };
  for (const auto& c : cases) {
    WriteText(index, c.json);
    auto reader = SafetensorsReader::Open(dir.string());
    ASSERT_FALSE(reader.ok()) << c.json;
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(reader.status().message()), HasSubstr(c.phrase));
  }
}

TEST(DType, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);  // overflow to +inf
}

// NaN and Inf are told apart in every stored dtype; finite extremes are
// neither.
TEST(DType, CountNonFiniteSeparatesNanFromInfInEveryDtype) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> values(1000, 0.5f);
  values[3] = nan;
  values[500] = -inf;
  values[501] = inf;
  values[999] = nan;
  values[7] = 65504.0f;  // the largest finite half
  values[8] = -1e-30f;
  EXPECT_EQ(CountNonFinite(DType::kF32, values.data(), values.size()).nan, 2);
  EXPECT_EQ(CountNonFinite(DType::kF32, values.data(), values.size()).inf, 2);
  for (const DType d : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> half(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      half[i] = d == DType::kF16 ? FloatToHalf(values[i])
                                 : FloatToBFloat16(values[i]);
    }
    const NonFiniteCount c = CountNonFinite(d, half.data(), half.size());
    EXPECT_EQ(c.nan, 2) << DTypeName(d);
    EXPECT_EQ(c.inf, 2) << DTypeName(d);
  }
  std::vector<float> finite(4096, -3.0f);
  EXPECT_EQ(CountNonFinite(DType::kF32, finite.data(), finite.size()).nan, 0);
  EXPECT_EQ(CountNonFinite(DType::kF32, finite.data(), finite.size()).inf, 0);
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  // 1 + 2^-8 lies exactly between two bf16 values: ties go to the even
  // mantissa.
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

// GGUF metadata of a Qwen3 model as llama.cpp's converter writes it (keys under
// the architecture's name, no output.weight when the embedding is tied).
GgufContents Qwen3GgufMetadata() {
  GgufContents g;
  auto u = [&](const std::string& k, uint64_t v) { g.metadata[k].scalar = v; };
  auto f = [&](const std::string& k, double v) { g.metadata[k].scalar = v; };
  g.metadata["general.architecture"].scalar = std::string("qwen3");
  u("qwen3.embedding_length", 1024);
  u("qwen3.feed_forward_length", 3072);
  u("qwen3.block_count", 28);
  u("qwen3.attention.head_count", 16);
  u("qwen3.attention.head_count_kv", 8);
  u("qwen3.attention.key_length", 128);
  u("qwen3.context_length", 40960);
  f("qwen3.attention.layer_norm_rms_epsilon", 1e-6);
  f("qwen3.rope.freq_base", 1000000.0);
  TensorView embd;
  embd.name = "token_embd.weight";
  embd.shape = {151936, 1024};
  g.tensors.push_back(embd);
  return g;
}

// llama.cpp writes Llama-3.1's RoPE scaling as a rope_freqs tensor of per-plane
// divisors: read back as the llama3 parameters that reproduce it, and refused
// when the divisors follow no llama3 curve.
TEST(Gguf, RopeFreqsAreReadAsLlama3Scaling) {
  GgufContents g = Qwen3GgufMetadata();  // head_dim 128
  g.metadata["qwen3.rope.freq_base"].scalar = 500000.0;
  RopeScaling want;
  want.type = RopeScalingType::kLlama3;
  want.factor = 8;
  want.original_max_position_embeddings = 8192;
  std::vector<float> divisors;
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128);
    divisors.push_back(
        static_cast<float>(base / Llama3InverseFrequency(want, base)));
  }
  TensorView freqs;
  freqs.name = "rope_freqs.weight";
  freqs.shape = {64};
  freqs.data = reinterpret_cast<const uint8_t*>(divisors.data());
  freqs.nbytes = 256;
  g.tensors.push_back(freqs);
  auto c = ConfigFromGguf(g);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_NEAR(c->rope_scaling.high_freq_factor, 4.0, 1e-3);
  divisors[20] *= 1.01f;  // one plane off the curve
  c = ConfigFromGguf(g);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not Llama-3's RoPE scaling curve"),
            std::string::npos)
      << c.status();
  g.tensors.back().shape = {32};
  c = ConfigFromGguf(g);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("must be F32 [64]"), std::string::npos)
      << c.status();
}

TEST(Gguf, Qwen3MetadataGivesTheQwen3Config) {
  auto c = ConfigFromGguf(Qwen3GgufMetadata());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "qwen3");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->head_dim, 128);  // explicit: != 1024 / 16
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->vocab_size, 151936);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->rope_layout, RopeLayout::kHalfSplit);
  EXPECT_EQ(c->rope_theta, 1e6);
  GgufContents g = Qwen3GgufMetadata();
  g.metadata["qwen3.rope.scaling.type"].scalar = std::string("yarn");
  g.metadata["qwen3.rope.scaling.factor"].scalar = 4.0;
  g.metadata["qwen3.rope.scaling.original_context_length"].scalar =
      uint64_t{32768};
  c = ConfigFromGguf(g);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 32768);
  g.metadata["qwen3.rope.scaling.type"].scalar = std::string("longrope");
  c = ConfigFromGguf(g);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("qwen3.rope.scaling.type"),
            std::string::npos);
  g = Qwen3GgufMetadata();
  g.metadata["general.architecture"].scalar = std::string("gemma3");
  c = ConfigFromGguf(g);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'gemma3'"), std::string::npos);
}

// Blocks built by hand from ggml's layout, decoded values worked out from it.
TEST(BlockQuant, Q8_0IsOneHalfScaleTimesInt8) {
  uint8_t b[kQ8_0BlockBytes];
  const uint16_t d = 0x3800;  // 0.5
  std::memcpy(b, &d, 2);
  for (int i = 0; i < 32; ++i)
    b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 16));
  float y[32];
  ConvertToFloat32(DType::kQ8_0, b, 32, y);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.5f * (i - 16)) << i;
}

TEST(BlockQuant, Q4_KUnpacksSixBitScalesAndMins) {
  uint8_t b[kQ4_KBlockBytes] = {};
  const uint16_t d = 0x3c00, dmin = 0x3800;  // 1.0, 0.5
  std::memcpy(b, &d, 2);
  std::memcpy(b + 2, &dmin, 2);
  // Sub-block j has scale 40 + j and min 20 + j (both need 6 bits); the last
  // four keep their low nibbles in bytes 8-11 and their top two bits in bytes
  // 0-7.
  for (int j = 0; j < 4; ++j) {
    const int sc_hi = 44 + j, m_hi = 24 + j;
    b[4 + j] = static_cast<uint8_t>((40 + j) | ((sc_hi >> 4) << 6));
    b[8 + j] = static_cast<uint8_t>((20 + j) | ((m_hi >> 4) << 6));
    b[12 + j] = static_cast<uint8_t>((sc_hi & 0xf) | ((m_hi & 0xf) << 4));
  }
  for (int i = 0; i < 128; ++i)
    b[16 + i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  float y[256];
  ConvertToFloat32(DType::kQ4_K, b, 256, y);
  for (int v = 0; v < 256; ++v) {
    const int group = v / 64, half = (v % 64) / 32, l = v % 32,
              j = 2 * group + half;
    const int q = half == 0 ? l % 16 : 15 - l % 16;
    EXPECT_EQ(y[v], static_cast<float>((40 + j) * q - 0.5 * (20 + j))) << v;
  }
}

TEST(BlockQuant, Q6_KJoinsLowNibblesAndHighBitPairs) {
  uint8_t b[kQ6_KBlockBytes] = {};
  // Value v (of 256) holds q = v % 64 (stored with the +32 offset removed on
  // decode), sub-block s = v / 16 has scale s - 8, d = 2.
  auto q_of = [](int v) { return v % 64; };
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int q0 = q_of(128 * h + l), q1 = q_of(128 * h + 32 + l),
                q2 = q_of(128 * h + 64 + l), q3 = q_of(128 * h + 96 + l);
      b[64 * h + l] = static_cast<uint8_t>((q0 & 0xf) | ((q2 & 0xf) << 4));
      b[64 * h + 32 + l] = static_cast<uint8_t>((q1 & 0xf) | ((q3 & 0xf) << 4));
      b[128 + 32 * h + l] = static_cast<uint8_t>(
          (q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
    }
  }
  for (int s = 0; s < 16; ++s)
    b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(s - 8));
  const uint16_t d = 0x4000;  // 2.0
  std::memcpy(b + 208, &d, 2);
  float y[256];
  ConvertToFloat32(DType::kQ6_K, b, 256, y);
  for (int v = 0; v < 256; ++v)
    EXPECT_EQ(y[v], 2.0f * (v / 16 - 8) * (q_of(v) - 32)) << v;
}

TEST(BlockQuant, GgufRowsMustBeWholeBlocksAndOtherQuantsAreRefusedByName) {
  auto write = [](DType dtype, std::vector<int64_t> shape, size_t bytes) {
    std::vector<uint8_t> data(bytes, 0);
    GgufBuilder b;
    b.AddString("general.architecture", "llama");
    b.AddTensor({"blk.0.attn_q.weight", dtype, shape, data.data(), bytes});
    const auto path = testing::FreshTempDir("gguf_blocks") / "m.gguf";
    EXPECT_TRUE(b.Write(path.string()).ok());
    return GgufReader::Open(path.string());
  };
  auto ok = write(DType::kQ4_K, {2, 256}, 2 * kQ4_KBlockBytes);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->contents().tensors[0].dtype, DType::kQ4_K);
  EXPECT_EQ((*ok)->contents().tensors[0].nbytes, 2 * kQ4_KBlockBytes);
  // A 64-wide row is a quarter of a Q4_K block: the writer and the parser
  // refuse it.
  GgufBuilder bad;
  std::vector<uint8_t> data(kQ4_KBlockBytes);
  bad.AddTensor({"w", DType::kQ4_K, {4, 64}, data.data(), data.size()});
  EXPECT_EQ(
      bad.Write((testing::FreshTempDir("gguf_blocks2") / "m.gguf").string())
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(GgufWriter, WhatItWritesParsesBackExactly) {
  GgufBuilder b;
  b.AddString("general.architecture", "llama");
  b.AddUint32("llama.block_count", 3);
  b.AddFloat32("llama.rope.freq_base", 500000.0f);
  b.AddBool("tokenizer.ggml.add_bos_token", true);
  b.AddStrings("tokenizer.ggml.tokens", {"<s>", "a",
                                         "\xe2\x96\x81"
                                         "b"});
  b.AddFloat32s("tokenizer.ggml.scores", {0.0f, -1.5f, -2.0f});
  b.AddInt32s("tokenizer.ggml.token_type", {3, 1, 1});
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<uint16_t> h = {0x3c00, 0xc000, 0x0001};
  TensorView t1{"blk.0.attn_q.weight",
                DType::kF32,
                {2, 3},
                reinterpret_cast<const uint8_t*>(a.data()),
                24};
  TensorView t2{"output_norm.weight",
                DType::kF16,
                {3},
                reinterpret_cast<const uint8_t*>(h.data()),
                6};
  b.AddTensor(t1);
  b.AddTensor(t2);
  const auto path = testing::FreshTempDir("gguf_writer") / "m.gguf";
  ASSERT_TRUE(b.Write(path.string()).ok());
  auto r = GgufReader::Open(path.string());
  ASSERT_TRUE(r.ok()) << r.status();
  const GgufContents& g = (*r)->contents();
  EXPECT_EQ(*GgufString(g, "general.architecture"), "llama");
  EXPECT_EQ(*GgufUint(g, "llama.block_count"), 3u);
  EXPECT_EQ(*GgufFloat(g, "llama.rope.freq_base"), 500000.0);
  EXPECT_TRUE(*GgufBool(g, "tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(g.metadata.at("tokenizer.ggml.tokens").array.size(), 3u);
  ASSERT_EQ(g.tensors.size(), 2u);
  EXPECT_EQ(g.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(g.tensors[0].data, a.data(), 24), 0);
  EXPECT_EQ(g.tensors[1].dtype, DType::kF16);
  EXPECT_EQ(std::memcmp(g.tensors[1].data, h.data(), 6), 0);
  // Each tensor's data starts on the 32-byte alignment.
  for (const auto& t : g.tensors) {
    EXPECT_EQ((t.data - g.tensors[0].data) % 32, 0) << t.name;
  }
  GgufBuilder twice;
  twice.AddUint32("k", 1);
  twice.AddUint32("k", 2);
  EXPECT_EQ(twice.Write(path.string()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Gguf, StoriesModelMetadataAndConfig) {
  auto reader = GgufReader::Open(testing::StoriesModelPath());
  ASSERT_TRUE(reader.ok()) << reader.status();
  const GgufContents& g = (*reader)->contents();
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(g.tensors.size(), 48u);
  auto config = ConfigFromGguf(g);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_layers, 5);
  EXPECT_EQ(config->hidden_size, 64);
  EXPECT_EQ(config->num_heads, 8);
  EXPECT_EQ(config->num_kv_heads, 4);
  EXPECT_EQ(config->head_dim, 8);
  EXPECT_EQ(config->intermediate_size, 172);
  EXPECT_EQ(config->vocab_size, 512);
  EXPECT_EQ(config->rope_dim, 8);
  EXPECT_EQ(config->rope_layout, RopeLayout::kAdjacent);
  EXPECT_NEAR(config->rms_norm_eps, 1e-5, 1e-9);
  EXPECT_EQ(config->rope_theta, 10000.0);
  auto ckpt = Checkpoint::Open(testing::StoriesModelPath());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const TensorView* k = (*ckpt)->Find("model.layers.0.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{32, 64}));  // [H_kv*d_h, d]
  EXPECT_NE((*ckpt)->Find("lm_head.weight"), nullptr);
  EXPECT_NE((*ckpt)->tokenizer(), nullptr);
}

constexpr char kQwen3Config[] = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "vocab_size": 100, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
  "tie_word_embeddings": true, "max_position_embeddings": 4096})";

TEST(Config, ParsesQwen3WithQkNormAndExplicitHeadDim) {
  auto c = ConfigFromHfJson(kQwen3Config, "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->head_dim, 32);  // not hidden/heads = 16
  EXPECT_EQ(c->rope_layout, RopeLayout::kHalfSplit);
  // Written back and read again, the config is the same.
  auto again = ConfigFromHfJson(ConfigToHfJson(*c), "again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->model_type, "qwen3");
  EXPECT_EQ(again->head_dim, 32);
  EXPECT_EQ(again->rope_theta, 1e6);
}

TEST(Config, Qwen2HasBiasesByDefault) {
  auto c = ConfigFromHfJson(R"({"architectures": ["Qwen2ForCausalLM"],
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
      "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 10})",
                            "c.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_EQ(c->head_dim, 16);
}

TEST(Config, RejectsUnsupportedSettingsNamingTheField) {
  struct Case {
    std::string json, phrase;
  } cases[] = {
      {R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})",
       "'architectures'"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
          "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 4,
          "num_key_value_heads": 3, "vocab_size": 10})",
       "num_key_value_heads (3) must divide"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
          "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 4,
          "vocab_size": 10, "rope_scaling": {"type": "longrope", "factor": 2}})",
       "'rope_scaling.rope_type' is \"longrope\""},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
          "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 4,
          "vocab_size": 10, "rope_scaling": {"type": "yarn"}})",
       "'rope_scaling.factor' is required by yarn"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
          "intermediate_size": 1, "num_hidden_layers": 1, "num_attention_heads": 4,
          "vocab_size": 10, "hidden_act": "gelu"})",
       "'hidden_act'"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
          "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10})",
       "'intermediate_size'"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "64"})",
       "'hidden_size'"},
      {"{not json", "not valid JSON"},
  };
  for (const auto& c : cases) {
    auto r = ConfigFromHfJson(c.json, "config.json");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.phrase));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("config.json"));
  }
}

TEST(TextCorpus, SplitsOnSeparatorLinesAndStrips) {
  const auto docs = SplitDocuments(
      "  first story\nline two\n<|endoftext|>\n\n<|endoftext|>\nsecond "
      "<|endoftext|> "
      "inline\n <|endoftext|> \n");
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0], "first story\nline two");
  EXPECT_EQ(docs[1], "second <|endoftext|> inline");
}

TEST(TextCorpus, SharedExcerptHas134Stories) {
  auto docs = ReadDocuments(testing::StoriesTextPath());
  ASSERT_TRUE(docs.ok()) << docs.status();
  EXPECT_EQ(docs->size(), 134u);
}

}  // namespace
}  // namespace lrkv
