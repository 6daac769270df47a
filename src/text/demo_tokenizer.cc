#include "text/demo_tokenizer.h"

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "text/decoder.h"
#include "text/sentencepiece_bpe_writer.h"

namespace tessera::text {
namespace {

// The training text: plain ASCII, single spaces, no newlines. Changing it
// changes the demo vocabulary (and every demo model's outputs).
constexpr const char* kTrainingText =
    "Once upon a time there was a little girl named Lily. She lived in a small house near the big woods with her "
    "mother and her dog Max. Every day Lily and Max went out to play in the garden. They liked to run after the "
    "birds and look at the flowers. One day Lily saw a red ball under a tree. She wanted to play with it, so she "
    "picked it up and threw it to Max. Max was very happy. He ran and jumped and brought the ball back to her. "
    "Then the sun went down and it was time to go home. Lily said, \"Thank you for playing with me, Max. You are "
    "my best friend.\" Her mother smiled and gave them some warm milk and a cookie. The next morning it was "
    "raining, and Lily was sad because she could not go out. Her mother said, \"Do not be sad. We can read a "
    "book together.\" They sat on the soft bed and read a story about a brave bear who wanted to find the moon. "
    "The bear walked for a long time. He asked the trees, the river and the wind where the moon was, but nobody "
    "knew. At last a wise old owl told him to look up at the sky at night. The bear waited, and when it was dark "
    "he saw the moon shining above the hill. He was so happy that he danced in the grass. Lily laughed and said "
    "she wanted to find the moon too. When the rain stopped, Lily and Max went to the hill. They looked at the "
    "sky and waited until the stars came out. Then they saw the big round moon, and Lily felt happy and warm. "
    "She learned that good things come to those who wait, and that friends make every day better.";

constexpr const char* kSpace = "\u2581";

using Symbols = std::vector<std::string>;

// The text as SentencePiece sees it ("▁Once▁upon..."), cut before every "▁"
// into words of single characters, with each word's count.
std::map<Symbols, int> count_words() {
  std::map<Symbols, int> words;
  Symbols word;
  const std::string text = std::string(" ") + kTrainingText;
  for (const char c : text) {
    if (c == ' ') {
      if (!word.empty()) ++words[word];
      word.assign(1, kSpace);
    } else {
      word.emplace_back(1, c);
    }
  }
  if (!word.empty()) ++words[word];
  return words;
}

// Greedy BPE training: merge the most frequent adjacent pair (ties: the
// smaller pair in byte order) until the vocabulary is full.
void learn_merges(SentencePieceBpe& tokenizer, std::unordered_map<std::string, int32_t>& ids) {
  std::map<Symbols, int> words = count_words();
  while (static_cast<int32_t>(tokenizer.pieces.size()) < kDemoVocabSize) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [word, count] : words) {
      for (size_t i = 0; i + 1 < word.size(); ++i) pairs[{word[i], word[i + 1]}] += count;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int best_count = 0;
    for (const auto& [pair, count] : pairs) {
      if (count > best_count) {
        best = &pair;
        best_count = count;
      }
    }
    TESSERA_CHECK(best != nullptr);  // the training text is long enough to fill the vocabulary
    const auto [left, right] = *best;
    const std::string merged = left + right;
    tokenizer.merges.emplace_back(ids.at(left), ids.at(right));
    if (ids.emplace(merged, static_cast<int32_t>(tokenizer.pieces.size())).second) tokenizer.pieces.push_back(merged);

    std::map<Symbols, int> next;
    for (const auto& [word, count] : words) {
      Symbols merged_word;
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
          merged_word.push_back(merged);
          ++i;
        } else {
          merged_word.push_back(word[i]);
        }
      }
      next[merged_word] += count;
    }
    words = std::move(next);
  }
}

}  // namespace

void write_demo_tokenizer(const std::filesystem::path& out_dir, int64_t model_max_length) {
  SentencePieceBpe tokenizer;
  tokenizer.pieces = {"<unk>", "<s>", "</s>"};
  for (int byte = 0; byte < 256; ++byte) tokenizer.pieces.push_back(byte_piece(static_cast<unsigned char>(byte)));
  tokenizer.pieces.push_back(kSpace);
  for (char c = '!'; c <= '~'; ++c) tokenizer.pieces.emplace_back(1, c);
  std::unordered_map<std::string, int32_t> ids;
  for (size_t id = 0; id < tokenizer.pieces.size(); ++id) ids.emplace(tokenizer.pieces[id], static_cast<int32_t>(id));
  learn_merges(tokenizer, ids);
  tokenizer.model_max_length = model_max_length;
  write_sentencepiece_bpe(tokenizer, out_dir);
}

}  // namespace tessera::text
