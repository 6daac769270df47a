// A restricted unpickler: reads pickle data into plain values, runs nothing.
//
// Python's pickle is a small stack machine whose GLOBAL + REDUCE opcodes can
// call any function (os.system, builtins.eval) while loading. This reader
// implements only the opcodes a torch state dict uses (protocols 2 to 5) and
// turns everything into PickleValue trees. It calls nothing itself: GLOBAL asks
// the caller's PickleHooks whether a name is allowed, and REDUCE, BUILD and
// BINPERSID hand plain values to the hooks, which build what they understand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::model {

struct PickleValue {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kTuple, kList, kDict, kGlobal, kObject };
  Kind kind = Kind::kNone;
  bool boolean = false;                                        // kBool
  int64_t integer = 0;                                         // kInt; kObject: a handle the hooks chose
  double number = 0;                                           // kFloat
  std::string text;                                            // kString, kBytes; kGlobal: "module.name"
  std::vector<PickleValue*> items;                             // kTuple, kList
  std::vector<std::pair<PickleValue*, PickleValue*>> entries;  // kDict, in insertion order
};

const char* pickle_kind_name(PickleValue::Kind kind);

class Unpickler;

// The caller's policy. Each hook throws tessera::Error to refuse.
class PickleHooks {
 public:
  virtual ~PickleHooks() = default;
  // GLOBAL / STACK_GLOBAL: refuse every name the caller does not know.
  virtual void check_global(const std::string& module, const std::string& name) = 0;
  // BINPERSID: the value a persistent id stands for.
  virtual PickleValue* persistent_load(PickleValue& pid, Unpickler& unpickler) = 0;
  // REDUCE: `callable` is a kGlobal that passed check_global, `args` a kTuple.
  virtual PickleValue* reduce(const PickleValue& callable, PickleValue& args, Unpickler& unpickler) = 0;
  // BUILD: `object.__setstate__(state)`.
  virtual void build(PickleValue& object, PickleValue& state, Unpickler& unpickler) = 0;
};

class Unpickler {
 public:
  // `source` names the data in messages, e.g. "dir/pytorch_model.bin (archive/data.pkl)".
  Unpickler(std::span<const std::byte> data, std::string source, PickleHooks& hooks);
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  // Runs to STOP and returns the result; values live as long as the Unpickler.
  // Throws Error(kInvalidArgument) naming the source on malformed data or an
  // unsupported opcode (with its byte and offset).
  PickleValue* load();

  // A new value owned by this unpickler (for the hooks).
  PickleValue* make(PickleValue::Kind kind);
  const std::string& source() const { return source_; }
  [[noreturn]] void fail(const std::string& what) const;

 private:
  uint8_t next_byte();
  uint64_t read_le(int bytes);
  std::string read_bytes(uint64_t length);
  std::string read_line();
  PickleValue* pop();
  PickleValue*& top();
  std::vector<PickleValue*> pop_to_mark();
  void push(PickleValue* value) { stack_.push_back(value); }
  PickleValue* make_string(PickleValue::Kind kind, uint64_t length);
  PickleValue* make_int(int64_t value);
  void push_global(const std::string& module, const std::string& name);
  void set_items(PickleValue& dict, const std::vector<PickleValue*>& items);
  bool step();  // one opcode; false after STOP

  std::span<const std::byte> data_;
  std::string source_;
  PickleHooks& hooks_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;           // where the current opcode starts, for messages
  std::deque<PickleValue> arena_;  // stable addresses; freed all at once
  std::vector<PickleValue*> stack_;
  std::vector<size_t> marks_;                        // stack sizes at each MARK
  std::unordered_map<uint64_t, PickleValue*> memo_;  // BINPUT index -> value
  PickleValue* result_ = nullptr;
};

}  // namespace tessera::model
