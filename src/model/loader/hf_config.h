// Reads a Hugging Face config.json (and generation_config.json) into a ModelSpec.
#pragma once

#include <filesystem>

#include <nlohmann/json_fwd.hpp>

#include "model/model_spec.h"

namespace tessera::model {

// Reads `dir`/config.json; eos ids are widened by generation_config.json when
// present; `overrides` then apply. Throws Error(kInvalidArgument) naming the
// file and the key when a required key is missing, has the wrong type or an
// impossible value.
ModelSpec read_model_spec(const std::filesystem::path& dir, const SpecOverrides& overrides = {});

// `spec` with `overrides` applied.
void apply_overrides(ModelSpec& spec, const SpecOverrides& overrides);

// The same from an already parsed config (used by tests and converters).
// `source` names the file in error messages.
ModelSpec parse_model_spec(const nlohmann::json& config, const std::string& source);

}  // namespace tessera::model
