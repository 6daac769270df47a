// IncrementalDetokenizer: the text of a stream of generated ids, one id at a
// time, handing out only text that later ids cannot change.
//
// Each step decodes a short window of recent ids (HF's DecodeStream and vLLM's
// detokenizer do the same) and returns what the newest ids add to the text of
// the window's first ids. Text is held back while it may still change:
//   - it ends in U+FFFD: an incomplete UTF-8 sequence of byte-fallback pieces
//     (<0xE8><0xAE> wait for <0xB2> to become 讲) or of byte-level tokens;
//   - the last piece is a byte-fallback piece: HF decodes a run of byte pieces
//     that is not valid UTF-8 as U+FFFD for every byte, so one more byte can
//     turn text already valid ("é") into replacements;
//   - the window's text does not extend the text already handed out.
// The window only starts after a piece that is not a byte piece and whose text
// is not empty, so SentencePiece's "drop the first space" rule and Metaspace's
// first-token rule act inside the window's context, never on new text.
// finish() returns the rest, so the concatenation of everything returned is
// decode(all ids) exactly.
//
// One instance per sequence; not thread-safe (the tokenizer is shared).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace tessera::text {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object. `skip_special` as in Tokenizer::decode.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special);

  // Adds one id; returns the text that became final (often empty).
  std::string push(int32_t id);
  // Ends the stream: returns all text still held back.
  std::string finish();

  // Everything returned so far.
  const std::string& text() const { return emitted_; }
  const std::vector<int32_t>& ids() const { return all_ids_; }

 private:
  std::string decode_window(size_t begin) const;
  bool is_byte_piece(int32_t id) const;
  bool is_dropped(int32_t id) const;

  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> all_ids_;
  std::vector<int32_t> window_;  // ids from the window's start
  size_t read_ = 0;              // window_[0, read_) is the context: its text was handed out
  std::string context_text_;     // decode(window_[0, read_))
  bool last_is_byte_ = false;    // the last id that decode keeps is a byte-fallback piece
  std::string emitted_;
};

}  // namespace tessera::text
