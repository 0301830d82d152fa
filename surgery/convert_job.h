// A whole conversion as users run it (`lrkv convert`, later the service's
// convert job): load the source, calibrate, convert, evaluate, write the
// checkpoint and its report. Nothing is written to the output folder unless
// everything succeeds.
#ifndef LRKV_SURGERY_CONVERT_JOB_H_
#define LRKV_SURGERY_CONVERT_JOB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/stop_check.h"
#include "formats/text_corpus.h"
#include "surgery/conversion_options.h"
#include "surgery/conversion_report.h"

namespace lrkv {

struct ConvertJobOptions {
  /// Source checkpoint (GGUF file or safetensors directory).
  std::string checkpoint;
  /// Output directory; must not exist yet (or be empty).
  std::string out_dir;
  ConversionOptions conversion;
  /// The RoPE mode asked for (`--rope-mode`); unset is `auto`, AutoRopeMode's
  /// choice. The job converts with conversion.rope_mode = this, resolved
  /// (WithRopeModeResolved): set this, not conversion.rope_mode, which the
  /// resolution overwrites.
  std::optional<RopeMode> rope_mode;
  /// MLA with decoupled RoPE: the latent's RMSNorm (ConversionOptions::
  /// latent_norm). Unset is on for --format gguf and deepseek (llama.cpp's
  /// deepseek2 and stock DeepSeek-V3 always apply it), off otherwise. The job
  /// converts with conversion.latent_norm = this, resolved.
  std::optional<bool> latent_norm;
  /// Calibration text (needed for the activation metric, read by per-layer
  /// sizes by loss and the latent norm's fit), its document range and the
  /// number of tokens to use at most.
  std::string calib_path;
  DocumentRange calib_range;
  int64_t calib_tokens = 16384;
  /// Per-layer sizes by loss (`--allocation layers`, objective loss or auto):
  /// the calibration documents (from the start of the range, whole) the loss is
  /// measured on, at least this many predicted tokens. Each layer and candidate
  /// size costs one forward pass over them.
  int64_t allocation_tokens = 8192;
  /// When set, perplexity before and after conversion on this text and range.
  std::string eval_path;
  DocumentRange eval_range;
  /// Write a plain Llama checkpoint with materialised per-head K/V instead of
  /// the factored layout.
  bool expand = false;
  /// "safetensors" (config.json + model.safetensors + tokenizer files) or
  /// "gguf" (model.gguf, what llama.cpp loads: plain layouts only, i.e. GQA/MQA
  /// or --expand), or "deepseek" (MLA with decoupled RoPE in the DeepSeek-V3
  /// layout, runtime/deepseek_layout.h).
  std::string format = "safetensors";
  /// Storage of the written matrices: "auto" (the source's own: bf16 stays
  /// bf16, f16 stays f16, float32 and quantised GGUF sources give f32), "f32",
  /// "f16" or "bf16" (each weight rounded once to nearest); norms and biases
  /// stay float32. The converted K/V factors are rounded to it before
  /// evaluation, so the reported perplexity is that of the written model.
  std::string weight_dtype = "auto";
  /// Largest safetensors shard in bytes; a larger model is written as HF shards
  /// with model.safetensors.index.json.
  uint64_t max_shard_bytes = 5'000'000'000;
  /// Polled between documents, windows and layers: the job stops with
  /// CancelledError (and writes nothing) once it returns true.
  StopCheck should_stop;
  /// Told as each stage (calibration, decomposition, evaluation, writing)
  /// starts.
  ProgressSink on_progress;
  /// Told as each layer's decomposition is done.
  UnitProgress on_layer;
};

// The file a GGUF export writes inside the output folder.
inline constexpr char kGgufExportFileName[] = "model.gguf";

// Most calibration tokens a conversion reads (16.8M: ~25 minutes of forward
// passes at the 0.6B shape on two cores; the Gram matrices converge long
// before).
inline constexpr int64_t kMaxCalibrationTokens = int64_t{1} << 24;

// Calibration tokens whose attention inputs the latent norm's fit reads per
// layer (spread over the calibration text): as many as 256 MiB of float32
// inputs hold over all layers, between 1,024 and 8,192. The refit of its
// up-projections has d_c² unknowns, so more samples let it go further before
// its held-out check stops it (kjv-d64, d_c = 192: held-out perplexity
// before healing 14.00 with 1,024 samples, see docs/results.md).
int64_t LatentNormSamples(int64_t hidden_size, int64_t num_layers);

class Checkpoint;

// What `--rope-mode auto` converts with: for LRKV `plane` — exact, associative,
// and the fastest decode of the LRKV modes (measured at context 2048 against
// the source, same run: docs/surgery.md "Default RoPE mode") — or `reconstruct`
// where an explicit odd
// --rank rules plane out; for MLA `reconstruct` (exact RoPE; the decoupled
// layout, `partial`, approximates it); GQA/MQA keep the source's RoPE.
RopeMode AutoRopeMode(const ConversionOptions& conversion);

// Whether the output format holds MLA only in DeepSeek's decoupled layout with
// the latent norm (gguf as llama.cpp's deepseek2, deepseek).
bool DeepseekFormat(const ConvertJobOptions& options);

// `options` with the choices left to `auto` made: conversion.rope_mode (and
// rope_mode) the mode asked for, or AutoRopeMode's — partial for MLA written
// in a DeepSeek format, the only layout those hold —, and
// conversion.latent_norm (and latent_norm) as asked, or on for MLA with
// decoupled RoPE in a DeepSeek format.
ConvertJobOptions WithAutoResolved(ConvertJobOptions options);

// InvalidArgument naming the option when one does not apply to `source` (the
// target's shape, the metric's inputs, formats, dtypes, limits); RunConvertJob
// checks it too, the service at submission.
absl::Status ValidateConvertJobOptions(const ConvertJobOptions& options,
                                       const Checkpoint& source);

// Runs the job and returns its report (also written as report.json /
// report.txt).
absl::StatusOr<ConversionReport> RunConvertJob(
    const ConvertJobOptions& options);

struct ConvertBenchOptions {
  /// Attention shape of the random model (FFN and vocabulary are kept tiny:
  /// they play no part in K/V surgery).
  int64_t layers = 24;
  int64_t hidden = 1536;
  int64_t heads = 12;
  int64_t kv_heads = 0;  // 0: MHA (= heads)
  int64_t head_dim = 128;
  uint64_t seed = 1;
  ConversionOptions conversion;
};

// Converts a random model of the given shape in memory (weight metric) and
// returns the report; its wall_seconds is the conversion time.
absl::StatusOr<ConversionReport> RunConvertBench(
    const ConvertBenchOptions& options);

}  // namespace lrkv

#endif  // LRKV_SURGERY_CONVERT_JOB_H_
