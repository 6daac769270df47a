// How `serve api_server` reads chat answers' markup: the tool-call format
// (--tool-call-parser, else the vocabulary's), the template that renders
// requests with tools, and the reasoning split (--reasoning-parser).
#pragma once

#include <string>

#include "cli/serving_model.h"
#include "server/api_server.h"

namespace tessera::cli {

// Throws Error(kInvalidArgument) naming the flag for a parser name that does
// not exist (before anything loads); empty names are fine.
void check_answer_markup_options(const std::string& tool_call_parser, const std::string& reasoning_parser);

// Fills the context's tool-call and reasoning fields for the loaded model and
// logs what it chose.
void set_up_answer_markup(const std::string& tool_call_parser, const std::string& reasoning_parser,
                          const ServingModel& model, server::ServingContext& context);

}  // namespace tessera::cli
