#include "lib/cli_args.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

namespace finegemm::tools {
namespace {

// "a,b," -> {"a", "b", ""}: empty items are kept so that they can be rejected.
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t comma; (comma = text.find(',', begin)) != std::string::npos; begin = comma + 1)
    out.push_back(text.substr(begin, comma - begin));
  out.push_back(text.substr(begin));
  return out;
}

bool parse_int64(const std::string& text, int64_t* out) {
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-')) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string join(const std::vector<std::string>& words, const char* sep) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

bool is_help(const std::string& word) { return word == "--help" || word == "-h"; }

}  // namespace

// ---- ParsedArgs ----------------------------------------------------------------------------------------------------

const ParsedArgs::Value* ParsedArgs::find(const std::string& name, std::initializer_list<OptionKind> kinds) const {
  const auto declared = declared_.find(name);
  if (declared == declared_.end()) throw std::logic_error("option --" + name + " is not declared");
  bool kind_ok = false;
  for (OptionKind k : kinds) kind_ok |= declared->second == k;
  if (!kind_ok) throw std::logic_error("option --" + name + " is read as another kind");
  const auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

bool ParsedArgs::flag(const std::string& name) const { return find(name, {OptionKind::kFlag}) != nullptr; }

int64_t ParsedArgs::integer(const std::string& name, int64_t fallback) const {
  const Value* v = find(name, {OptionKind::kInteger});
  return v ? v->integers[0] : fallback;
}

double ParsedArgs::number(const std::string& name, double fallback) const {
  const Value* v = find(name, {OptionKind::kNumber});
  return v ? v->number : fallback;
}

std::string ParsedArgs::text(const std::string& name, const std::string& fallback) const {
  const Value* v = find(name, {OptionKind::kWord, OptionKind::kInputFile, OptionKind::kOutputFile});
  return v ? v->text : fallback;
}

std::vector<std::string> ParsedArgs::words(const std::string& name, const std::vector<std::string>& fallback) const {
  const Value* v = find(name, {OptionKind::kWordList});
  return v ? v->words : fallback;
}

std::vector<int64_t> ParsedArgs::integers(const std::string& name) const {
  const Value* v = find(name, {OptionKind::kIntegerList});
  return v ? v->integers : std::vector<int64_t>{};
}

std::pair<int64_t, int64_t> ParsedArgs::range(const std::string& name, std::pair<int64_t, int64_t> fallback) const {
  const Value* v = find(name, {OptionKind::kRange});
  return v ? std::make_pair(v->integers[0], v->integers[1]) : fallback;
}

// ---- OptionSet -----------------------------------------------------------------------------------------------------

OptionSet& OptionSet::declare(const std::string& name, Spec spec) {
  if (!specs_.emplace(name, std::move(spec)).second) throw std::logic_error("option --" + name + " declared twice");
  return *this;
}

OptionSet& OptionSet::flag(const std::string& name) { return declare(name, Spec{OptionKind::kFlag}); }

OptionSet& OptionSet::integer(const std::string& name, int64_t lo, int64_t hi) {
  Spec s{OptionKind::kInteger};
  s.int_lo = lo;
  s.int_hi = hi;
  return declare(name, s);
}

OptionSet& OptionSet::number(const std::string& name, double lo, double hi, bool lo_open) {
  Spec s{OptionKind::kNumber};
  s.num_lo = lo;
  s.num_hi = hi;
  s.lo_open = lo_open;
  return declare(name, s);
}

OptionSet& OptionSet::word(const std::string& name, std::vector<std::string> choices) {
  Spec s{OptionKind::kWord};
  s.choices = std::move(choices);
  return declare(name, s);
}

OptionSet& OptionSet::word_list(const std::string& name, std::vector<std::string> choices) {
  Spec s{OptionKind::kWordList};
  s.choices = std::move(choices);
  return declare(name, s);
}

OptionSet& OptionSet::integer_list(const std::string& name, int64_t lo, int64_t hi, std::string alternative) {
  Spec s{OptionKind::kIntegerList};
  s.int_lo = lo;
  s.int_hi = hi;
  s.alternative = std::move(alternative);
  return declare(name, s);
}

OptionSet& OptionSet::input_file(const std::string& name) { return declare(name, Spec{OptionKind::kInputFile}); }

OptionSet& OptionSet::output_file(const std::string& name) { return declare(name, Spec{OptionKind::kOutputFile}); }

OptionSet& OptionSet::range(const std::string& name, int64_t lo, int64_t hi) {
  Spec s{OptionKind::kRange};
  s.int_lo = lo;
  s.int_hi = hi;
  return declare(name, s);
}

std::string OptionSet::accepts(const Spec& s) {
  const std::string ints = std::to_string(s.int_lo) + ".." + std::to_string(s.int_hi);
  switch (s.kind) {
    case OptionKind::kFlag: return "no value";
    case OptionKind::kInteger: return "an integer in " + ints;
    case OptionKind::kNumber:
      return "a number in " + std::string(s.lo_open ? "(" : "[") + format_number(s.num_lo) + ", " +
             format_number(s.num_hi) + "]";
    case OptionKind::kWord: return "one of " + join(s.choices, ", ");
    case OptionKind::kWordList: return "a comma list of distinct words from " + join(s.choices, ", ");
    case OptionKind::kIntegerList:
      return (s.alternative.empty() ? "" : "'" + s.alternative + "' or ") + "a comma list of distinct integers in " +
             ints;
    case OptionKind::kInputFile: return "an existing file";
    case OptionKind::kOutputFile: return "a file path in an existing directory";
    case OptionKind::kRange: return "LO:HI with " + std::to_string(s.int_lo) + " <= LO <= HI <= " + std::to_string(s.int_hi);
  }
  return {};
}

void OptionSet::fail(const std::string& what) const { throw UsageError("finegemm " + command_ + ": " + what); }

ParsedArgs::Value OptionSet::convert(const std::string& name, const Spec& spec, const std::string& text) const {
  ParsedArgs::Value v;
  v.kind = spec.kind;
  v.text = text;
  auto bad = [&]() { fail("--" + name + " takes " + accepts(spec) + ", got '" + text + "'"); };
  auto in_range = [&](const std::string& item, int64_t* out) {
    return parse_int64(item, out) && *out >= spec.int_lo && *out <= spec.int_hi;
  };
  switch (spec.kind) {
    case OptionKind::kFlag: break;
    case OptionKind::kInteger: {
      int64_t i = 0;
      if (!in_range(text, &i)) bad();
      v.integers.push_back(i);
      break;
    }
    case OptionKind::kNumber: {
      char* end = nullptr;
      const double d = std::strtod(text.c_str(), &end);
      const bool above_lo = spec.lo_open ? d > spec.num_lo : d >= spec.num_lo;
      if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || *end != '\0' || !std::isfinite(d) ||
          !above_lo || d > spec.num_hi)
        bad();
      v.number = d;
      break;
    }
    case OptionKind::kWord: {
      bool known = false;
      for (const std::string& c : spec.choices) known |= c == text;
      if (!known) bad();
      break;
    }
    case OptionKind::kWordList: {
      std::set<std::string> seen;
      for (const std::string& item : split_commas(text)) {
        bool known = false;
        for (const std::string& c : spec.choices) known |= c == item;
        if (!known || !seen.insert(item).second) bad();
        v.words.push_back(item);
      }
      break;
    }
    case OptionKind::kIntegerList: {
      if (!spec.alternative.empty() && text == spec.alternative) break;
      std::set<int64_t> seen;
      for (const std::string& item : split_commas(text)) {
        int64_t i = 0;
        if (!in_range(item, &i) || !seen.insert(i).second) bad();
        v.integers.push_back(i);
      }
      break;
    }
    case OptionKind::kInputFile: {
      std::error_code ec;
      if (text.empty() || !std::filesystem::is_regular_file(text, ec)) bad();
      break;
    }
    case OptionKind::kOutputFile: {
      std::error_code ec;
      const std::filesystem::path path(text);
      const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
      if (text.empty() || !path.has_filename() || std::filesystem::is_directory(path, ec) ||
          !std::filesystem::is_directory(dir, ec))
        bad();
      break;
    }
    case OptionKind::kRange: {
      const size_t colon = text.find(':');
      int64_t lo = 0, hi = 0;
      if (colon == std::string::npos || !in_range(text.substr(0, colon), &lo) ||
          !in_range(text.substr(colon + 1), &hi) || hi < lo)
        bad();
      v.integers = {lo, hi};
      break;
    }
  }
  return v;
}

ParsedArgs OptionSet::parse(int argc, const char* const* argv) const {
  ParsedArgs out;
  for (const auto& [name, spec] : specs_) out.declared_[name] = spec.kind;
  for (int i = 0; i < argc; ++i) {
    if (is_help(argv[i])) {
      out.help_ = true;
      return out;
    }
  }
  std::vector<std::string> names;
  for (const auto& [name, spec] : specs_) names.push_back("--" + name);
  const std::string options = specs_.empty() ? command_ + " takes no options" : "options: " + join(names, ", ");
  for (int i = 0; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] != '-') fail("unexpected argument '" + word + "' (" + options + ")");
    if (word.rfind("--", 0) != 0) fail("unknown option " + word + " (" + options + ")");
    std::string name = word.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const auto it = specs_.find(name);
    if (it == specs_.end()) fail("unknown option --" + name + " (" + options + ")");
    const Spec& spec = it->second;
    if (out.values_.count(name) != 0) fail("--" + name + " given twice");
    if (spec.kind == OptionKind::kFlag) {
      if (inline_value) fail("--" + name + " takes no value, got '" + value + "'");
    } else if (!inline_value) {
      // The next word is the value unless there is none or it is an option (a negative number is a value).
      if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0)
        fail("--" + name + " takes " + accepts(spec) + ", got no value");
      value = argv[++i];
    }
    out.values_[name] = convert(name, spec, value);
  }
  return out;
}

}  // namespace finegemm::tools
