// The options of `lrkv heal` and of lrkvd's heal jobs, declared once
// (base/option_schema.h). Processes, devices and trainer checkpoints of this
// machine are a local run's only. Ranges are HealOptions::Validate's; what
// needs the checkpoints (a teacher for kd, the context, memory) is
// ValidateHealJobOptions's.
#ifndef LRKV_TRAIN_HEAL_OPTIONS_SCHEMA_H_
#define LRKV_TRAIN_HEAL_OPTIONS_SCHEMA_H_

#include "base/option_schema.h"
#include "train/heal_job.h"

namespace lrkv {

const OptionSchema<HealJobOptions>& HealOptionSchema();

}  // namespace lrkv

#endif  // LRKV_TRAIN_HEAL_OPTIONS_SCHEMA_H_
