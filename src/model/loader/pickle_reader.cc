#include "model/loader/pickle_reader.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "core/error.h"

namespace tessera::model {

namespace {

// Names of opcodes this reader refuses, so the message says what was met.
const char* refused_opcode_name(uint8_t op) {
  switch (op) {
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'P': return "PERSID";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 'g': return "GET";
    case 'p': return "PUT";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

// A Python int in a 64-bit signed value: LONG1/LONG4 carry little-endian
// two's complement of any length; tensor sizes and offsets fit in 8 bytes.
bool decode_long(const std::string& bytes, int64_t* out) {
  if (bytes.size() > 8) return false;
  if (bytes.empty()) {
    *out = 0;
    return true;
  }
  uint64_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) value = value << 8 | static_cast<uint8_t>(bytes[i]);
  if (bytes.size() < 8 && (static_cast<uint8_t>(bytes.back()) & 0x80)) value |= ~0ull << (8 * bytes.size());
  *out = static_cast<int64_t>(value);
  return true;
}

}  // namespace

const char* pickle_kind_name(PickleValue::Kind kind) {
  switch (kind) {
    case PickleValue::Kind::kNone: return "None";
    case PickleValue::Kind::kBool: return "bool";
    case PickleValue::Kind::kInt: return "int";
    case PickleValue::Kind::kFloat: return "float";
    case PickleValue::Kind::kString: return "str";
    case PickleValue::Kind::kBytes: return "bytes";
    case PickleValue::Kind::kTuple: return "tuple";
    case PickleValue::Kind::kList: return "list";
    case PickleValue::Kind::kDict: return "dict";
    case PickleValue::Kind::kGlobal: return "global";
    case PickleValue::Kind::kObject: return "object";
  }
  return "?";
}

Unpickler::Unpickler(std::span<const std::byte> data, std::string source, PickleHooks& hooks)
    : data_(data), source_(std::move(source)), hooks_(hooks) {}

void Unpickler::fail(const std::string& what) const {
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("{}: bad pickle data at offset {}: {}", source_, op_offset_, what),
              "the file is corrupt or was not written by torch.save; convert the checkpoint to safetensors");
}

PickleValue* Unpickler::make(PickleValue::Kind kind) {
  arena_.emplace_back();
  arena_.back().kind = kind;
  return &arena_.back();
}

PickleValue* Unpickler::make_int(int64_t value) {
  PickleValue* v = make(PickleValue::Kind::kInt);
  v->integer = value;
  return v;
}

PickleValue* Unpickler::make_string(PickleValue::Kind kind, uint64_t length) {
  PickleValue* v = make(kind);
  v->text = read_bytes(length);
  return v;
}

uint8_t Unpickler::next_byte() {
  if (pos_ >= data_.size()) fail("data ends before STOP");
  return static_cast<uint8_t>(data_[pos_++]);
}

uint64_t Unpickler::read_le(int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(next_byte()) << (8 * i);
  return value;
}

std::string Unpickler::read_bytes(uint64_t length) {
  if (length > data_.size() - pos_) fail(fmt::format("a {} byte string runs past the end of the data", length));
  std::string text(reinterpret_cast<const char*>(data_.data()) + pos_, length);
  pos_ += length;
  return text;
}

std::string Unpickler::read_line() {
  // Module and attribute names are short; the bound keeps garbage from growing a string.
  constexpr size_t kMaxLine = 256;
  std::string line;
  for (uint8_t c = next_byte(); c != '\n'; c = next_byte()) {
    if (line.size() == kMaxLine) fail("a GLOBAL name is longer than 256 bytes");
    line.push_back(static_cast<char>(c));
  }
  return line;
}

PickleValue* Unpickler::pop() {
  if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("stack underflow");
  PickleValue* value = stack_.back();
  stack_.pop_back();
  return value;
}

PickleValue*& Unpickler::top() {
  if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("stack underflow");
  return stack_.back();
}

std::vector<PickleValue*> Unpickler::pop_to_mark() {
  if (marks_.empty()) fail("no MARK on the stack");
  const size_t mark = marks_.back();
  marks_.pop_back();
  std::vector<PickleValue*> items(stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end());
  stack_.resize(mark);
  return items;
}

void Unpickler::push_global(const std::string& module, const std::string& name) {
  hooks_.check_global(module, name);  // throws for anything not explicitly allowed
  PickleValue* v = make(PickleValue::Kind::kGlobal);
  v->text = module + "." + name;
  push(v);
}

void Unpickler::set_items(PickleValue& dict, const std::vector<PickleValue*>& items) {
  if (dict.kind != PickleValue::Kind::kDict) fail(fmt::format("SETITEM(S) on a {}", pickle_kind_name(dict.kind)));
  if (items.size() % 2 != 0) fail("SETITEMS with an odd number of values");
  for (size_t i = 0; i < items.size(); i += 2) dict.entries.emplace_back(items[i], items[i + 1]);
}

PickleValue* Unpickler::load() {
  while (step()) {
  }
  return result_;
}

bool Unpickler::step() {
  using Kind = PickleValue::Kind;
  op_offset_ = pos_;
  const uint8_t op = next_byte();
  switch (op) {
    case 0x80: {  // PROTO
      const uint8_t protocol = next_byte();
      if (protocol > 5) fail(fmt::format("pickle protocol {} is newer than 5", protocol));
      return true;
    }
    case 0x95: read_le(8); return true;       // FRAME: a length hint only
    case '.': result_ = pop(); return false;  // STOP
    case 'N': push(make(Kind::kNone)); return true;
    case 0x88:
    case 0x89: {  // NEWTRUE, NEWFALSE
      PickleValue* v = make(Kind::kBool);
      v->boolean = op == 0x88;
      push(v);
      return true;
    }
    case 'J': push(make_int(static_cast<int32_t>(read_le(4)))); return true;  // BININT
    case 'K': push(make_int(read_le(1))); return true;                        // BININT1
    case 'M': push(make_int(read_le(2))); return true;                        // BININT2
    case 0x8a:
    case 0x8b: {  // LONG1, LONG4
      const uint64_t length = read_le(op == 0x8a ? 1 : 4);
      int64_t value = 0;
      if (!decode_long(read_bytes(length), &value))
        fail(fmt::format("an integer of {} bytes does not fit in 64 bits", length));
      push(make_int(value));
      return true;
    }
    case 'G': {  // BINFLOAT: big-endian double
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = bits << 8 | next_byte();
      PickleValue* v = make(Kind::kFloat);
      v->number = std::bit_cast<double>(bits);
      push(v);
      return true;
    }
    case 'X': push(make_string(Kind::kString, read_le(4))); return true;   // BINUNICODE
    case 0x8c: push(make_string(Kind::kString, read_le(1))); return true;  // SHORT_BINUNICODE
    case 0x8d: push(make_string(Kind::kString, read_le(8))); return true;  // BINUNICODE8
    case 'C': push(make_string(Kind::kBytes, read_le(1))); return true;    // SHORT_BINBYTES
    case 'B': push(make_string(Kind::kBytes, read_le(4))); return true;    // BINBYTES
    case 0x8e: push(make_string(Kind::kBytes, read_le(8))); return true;   // BINBYTES8
    case 'U': push(make_string(Kind::kBytes, read_le(1))); return true;    // SHORT_BINSTRING
    case 'T': {                                                            // BINSTRING: signed length
      const auto length = static_cast<int32_t>(read_le(4));
      if (length < 0) fail("BINSTRING with a negative length");
      push(make_string(Kind::kBytes, static_cast<uint64_t>(length)));
      return true;
    }
    case '}': push(make(Kind::kDict)); return true;          // EMPTY_DICT
    case ']': push(make(Kind::kList)); return true;          // EMPTY_LIST
    case ')': push(make(Kind::kTuple)); return true;         // EMPTY_TUPLE
    case '(': marks_.push_back(stack_.size()); return true;  // MARK
    case '1': pop_to_mark(); return true;                    // POP_MARK
    case '0': pop(); return true;                            // POP
    case '2': push(top()); return true;                      // DUP
    case 't':
    case 'l': {  // TUPLE, LIST
      PickleValue* v = make(op == 't' ? Kind::kTuple : Kind::kList);
      v->items = pop_to_mark();
      push(v);
      return true;
    }
    case 'd': {  // DICT
      PickleValue* v = make(Kind::kDict);
      set_items(*v, pop_to_mark());
      push(v);
      return true;
    }
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
      PickleValue* v = make(Kind::kTuple);
      v->items.resize(op - 0x84);
      for (size_t i = v->items.size(); i-- > 0;) v->items[i] = pop();
      push(v);
      return true;
    }
    case 's': {  // SETITEM
      PickleValue* value = pop();
      PickleValue* key = pop();
      set_items(*top(), {key, value});
      return true;
    }
    case 'u': {  // SETITEMS
      std::vector<PickleValue*> items = pop_to_mark();
      set_items(*top(), items);
      return true;
    }
    case 'a':
    case 'e': {  // APPEND, APPENDS
      std::vector<PickleValue*> items = op == 'a' ? std::vector<PickleValue*>{pop()} : pop_to_mark();
      PickleValue& list = *top();
      if (list.kind != Kind::kList) fail(fmt::format("APPEND to a {}", pickle_kind_name(list.kind)));
      list.items.insert(list.items.end(), items.begin(), items.end());
      return true;
    }
    case 'q': memo_[read_le(1)] = top(); return true;  // BINPUT
    case 'r': memo_[read_le(4)] = top(); return true;  // LONG_BINPUT
    case 0x94: {                                       // MEMOIZE: next free index
      PickleValue* value = top();
      const uint64_t index = memo_.size();
      memo_[index] = value;
      return true;
    }
    case 'h':
    case 'j': {  // BINGET, LONG_BINGET
      const uint64_t index = read_le(op == 'h' ? 1 : 4);
      auto it = memo_.find(index);
      if (it == memo_.end()) fail(fmt::format("memo entry {} was never stored", index));
      push(it->second);
      return true;
    }
    case 'c': {  // GLOBAL "module\nname\n"
      std::string module = read_line();
      std::string name = read_line();
      push_global(module, name);
      return true;
    }
    case 0x93: {  // STACK_GLOBAL
      PickleValue* name = pop();
      PickleValue* module = pop();
      if (module->kind != Kind::kString || name->kind != Kind::kString) fail("STACK_GLOBAL of non-strings");
      push_global(module->text, name->text);
      return true;
    }
    case 'R': {  // REDUCE: callable(*args), decided by the hooks
      PickleValue* args = pop();
      PickleValue* callable = pop();
      if (callable->kind != Kind::kGlobal) fail(fmt::format("REDUCE calls a {}", pickle_kind_name(callable->kind)));
      if (args->kind != Kind::kTuple) fail(fmt::format("REDUCE with {} arguments", pickle_kind_name(args->kind)));
      push(hooks_.reduce(*callable, *args, *this));
      return true;
    }
    case 'b': {  // BUILD
      PickleValue* state = pop();
      hooks_.build(*top(), *state, *this);
      return true;
    }
    case 'Q': {  // BINPERSID
      PickleValue* pid = pop();
      push(hooks_.persistent_load(*pid, *this));
      return true;
    }
    default: {
      const char* name = refused_opcode_name(op);
      fail(fmt::format("pickle opcode 0x{:02x}{} is not supported by tessera's restricted unpickler", op,
                       name ? fmt::format(" ({})", name) : std::string()));
    }
  }
}

}  // namespace tessera::model
