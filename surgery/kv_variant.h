// What each K/V variant (KvVariant: mha, gqa, mqa, mla, lrkv) means, in one
// type per variant (surgery/variants/): its name and how a configuration of it
// reads ("lrkv r=51"), the size a configuration varies, the elements it caches
// per token and the K/V parameters it stores (the formulas of docs/design.md,
// "The math that must hold"), its valid sizes and the candidates a budget
// chooses among, the RoPE modes a conversion to it accepts and their checks,
// its explicit-size options, which converted model configs it describes, and
// the multiply-adds of its decode step in the study. No LibTorch: the service
// and CLI use it through cache_accounting.h. The conversion itself is the
// schemes' (kv_scheme.h), the decode engines the runtime layouts'
// (runtime/kv_layout.h). A new variant is a file under variants/ and a line in
// kv_variant.cc's registry.
#ifndef LRKV_SURGERY_KV_VARIANT_H_
#define LRKV_SURGERY_KV_VARIANT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "formats/config.h"
#include "surgery/cache_accounting.h"
#include "surgery/conversion_options.h"

namespace lrkv {

// One conversion the study (study/compare_job.h) measures at a budget: the
// decode mode its row is labelled with ("expanded" for dense K/V, else a RoPE
// mode's name), the RoPE mode it converts with, and whether with MLA's latent
// norm.
struct StudyMode {
  std::string mode;
  RopeMode rope_mode = RopeMode::kReconstruct;
  bool latent_norm = false;
};

class KvVariantType {
 public:
  virtual ~KvVariantType() = default;

  virtual KvVariant id() const = 0;
  // "mha", "gqa", "mqa", "mla", "lrkv".
  virtual const char* name() const = 0;

  // The size field a configuration of this variant varies ("r" of LRKV, "d_c"
  // of MLA, "n_kv" of GQA) and its label; null where it has none.
  virtual const char* size_label() const { return nullptr; }
  virtual int64_t* SizeField(KvConfig*) const { return nullptr; }
  // Whether a per-layer allocation can vary that size (layer_sizes).
  virtual bool allocatable() const { return false; }
  // What the configuration's name is followed by beyond its size (MLA's
  // " d_rope=8").
  virtual std::string DescribeExtra(const KvConfig&) const { return ""; }

  // Elements cached per token by one layer of uniform configuration `c`.
  virtual int64_t CacheElements(const AttentionShape& s,
                                const KvConfig& c) const = 0;
  // K/V projection weights of one such layer.
  virtual int64_t Parameters(const AttentionShape& s,
                             const KvConfig& c) const = 0;
  // InvalidArgument naming the valid range where `c` is impossible for `s`.
  virtual absl::Status Validate(const AttentionShape& s,
                                const KvConfig& c) const {
    return absl::OkStatus();
  }
  // Every configuration a budget may pick, smallest cache first, built on
  // `base` (variant, even_rank and rope_dim set).
  virtual std::vector<KvConfig> BudgetCandidates(const AttentionShape& s,
                                                 const KvConfig& base) const {
    return {base};
  }
  // The base `lrkv cache --budget` plans from: what convert's default RoPE
  // mode asks of the size.
  virtual KvConfig DefaultBudgetBase() const {
    KvConfig c;
    c.variant = id();
    return c;
  }

  // Whether a conversion can target it (mha is the source itself).
  virtual bool convertible() const { return true; }
  // The RoPE modes a conversion to it accepts.
  virtual std::vector<RopeMode> rope_modes() const {
    return {RopeMode::kReconstruct};
  }
  // The RoPE mode a conversion takes when none is given.
  virtual RopeMode DefaultRopeMode(const ConversionOptions&) const {
    return RopeMode::kReconstruct;
  }
  // Whether `mode` keeps this variant's RoPE dims rotated in a cached part of
  // their own (MLA's decoupled key), costing cache beside the size.
  virtual bool CachesRopeDims(RopeMode) const { return false; }
  // RoPE planes kept by partial RoPE when the options leave it to the variant,
  // of a head's `planes`.
  virtual int64_t DefaultPlanesKept(int64_t planes) const { return planes; }
  // The variant's own checks of `options` (its RoPE mode against the model).
  virtual absl::Status CheckConversion(const ModelConfig&,
                                       const ConversionOptions&) const {
    return absl::OkStatus();
  }
  // Sets what the options' RoPE mode asks of target's sizes beside the size
  // itself (LRKV's even rank, MLA's decoupled RoPE dims).
  virtual void PrepareTarget(const ModelConfig&, const ConversionOptions&,
                             KvConfig*) const {}
  // Sets target's size from the options' explicit size; InvalidArgument naming
  // the option to give when it is missing.
  virtual absl::Status SetExplicitSize(const ConversionOptions&,
                                       KvConfig*) const {
    return absl::OkStatus();
  }

  // Whether its conversion pools the source's KV heads into fewer dense ones
  // (GQA, MQA), and how many the converted model has (0 when not pooled).
  virtual bool pooled() const { return false; }
  virtual int64_t PooledKvHeads(const KvConfig&) const { return 0; }
  // Whether its conversions export to the DeepSeek layouts (llama.cpp's
  // deepseek2 GGUF, DeepSeek-V3 safetensors), which cache the RoPE dims apart
  // (CachesRopeDims) and normalise the latent.
  virtual bool deepseek_layout() const { return false; }

  // Whether a (converted) model of config `c` is of this variant, and its
  // accounting configuration.
  virtual bool Describes(const ModelConfig& c) const = 0;
  virtual KvConfig FromModel(const ModelConfig& c) const = 0;

  // The conversions the study measures at each budget, given the RoPE modes
  // it compares (its --rope-mode list). Dense K/V: one, expanded. A variant
  // without a size (size_label() null: MQA) is measured once, at the first
  // budget its cache fits.
  virtual std::vector<StudyMode> StudyModes(
      const std::vector<std::string>& rope_modes) const {
    (void)rope_modes;
    return {{"expanded", RopeMode::kReconstruct}};
  }

  // Multiply-adds of one decode step's attention over `positions` cached
  // positions, decoding in `mode` (the study's MACs column).
  virtual int64_t DecodeMacs(const AttentionShape& s, const KvConfig& c,
                             const std::string& mode, int64_t positions) const;
};

// The type of `variant`, and every type in KvVariant order.
const KvVariantType& KvVariantTypeOf(KvVariant variant);
const std::vector<const KvVariantType*>& AllKvVariantTypes();

// The accounting configuration of a (converted) model: the variant that
// describes it, with its sizes.
KvConfig KvConfigOf(const ModelConfig& config);

}  // namespace lrkv

#endif  // LRKV_SURGERY_KV_VARIANT_H_
