// The CLI's option parser: each command declares its options (name, kind, accepted values), and parse() either
// returns every value checked and converted, or throws UsageError with one line naming the command, the option and
// what it accepts. Syntax: `--name VALUE` or `--name=VALUE`; flags take no value; no positional arguments.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace finegemm::tools {

/// A bad command line: what() is the one line to print on stderr (the process then exits 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// What an option takes.
enum class OptionKind { kFlag, kInteger, kNumber, kWord, kWordList, kIntegerList, kInputFile, kOutputFile, kRange };

/// The checked values of one command line. Getters take the option's name without "--" and a default for when it
/// was not given; asking for an undeclared option or the wrong kind is a programming error (std::logic_error).
class ParsedArgs {
 public:
  bool help() const { return help_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool flag(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t fallback) const;
  double number(const std::string& name, double fallback) const;
  /// A word (enum option), a path, or a text value.
  std::string text(const std::string& name, const std::string& fallback) const;
  /// A comma list of words; `fallback` when not given.
  std::vector<std::string> words(const std::string& name, const std::vector<std::string>& fallback) const;
  /// A comma list of integers (empty when the option was given its alternative word, see OptionSet::integer_list).
  std::vector<int64_t> integers(const std::string& name) const;
  std::pair<int64_t, int64_t> range(const std::string& name, std::pair<int64_t, int64_t> fallback) const;

 private:
  friend class OptionSet;
  struct Value {
    OptionKind kind = OptionKind::kFlag;
    std::string text;
    std::vector<std::string> words;
    std::vector<int64_t> integers;
    double number = 0;
  };
  const Value* find(const std::string& name, std::initializer_list<OptionKind> kinds) const;
  bool help_ = false;
  std::map<std::string, Value> values_;
  std::map<std::string, OptionKind> declared_;  // every option of the command, for the getters' checks
};

/// The options of one command, declared once: `OptionSet("plan").integer("sms", 1, 1024)...`.
class OptionSet {
 public:
  explicit OptionSet(std::string command) : command_(std::move(command)) {}

  OptionSet& flag(const std::string& name);
  /// An integer in [lo, hi].
  OptionSet& integer(const std::string& name, int64_t lo, int64_t hi);
  /// A finite number in (lo, hi] when lo_open, else [lo, hi].
  OptionSet& number(const std::string& name, double lo, double hi, bool lo_open);
  /// One of `choices`.
  OptionSet& word(const std::string& name, std::vector<std::string> choices);
  /// A comma list of distinct words from `choices`, at least one.
  OptionSet& word_list(const std::string& name, std::vector<std::string> choices);
  /// A comma list of distinct integers in [lo, hi], at least one; or, when `alternative` is not empty, that word.
  OptionSet& integer_list(const std::string& name, int64_t lo, int64_t hi, std::string alternative = "");
  /// The path of an existing regular file.
  OptionSet& input_file(const std::string& name);
  /// The path of a file to write, in an existing directory.
  OptionSet& output_file(const std::string& name);
  /// LO:HI with lo <= LO <= HI <= hi.
  OptionSet& range(const std::string& name, int64_t lo, int64_t hi);

  /// Parses the words after the command name. `--help` or `-h` sets help() and stops there. Throws UsageError on an
  /// unknown option, a missing or unexpected value, a value not accepted, an option given twice, or a positional
  /// argument.
  ParsedArgs parse(int argc, const char* const* argv) const;

  const std::string& command() const { return command_; }

 private:
  struct Spec {
    OptionKind kind = OptionKind::kFlag;
    int64_t int_lo = 0, int_hi = 0;
    double num_lo = 0, num_hi = 0;
    bool lo_open = false;
    std::vector<std::string> choices;
    std::string alternative;
  };
  OptionSet& declare(const std::string& name, Spec spec);
  /// What `spec` accepts, for the error line: "an integer in 1..1024", "one of memset, read, none", ...
  static std::string accepts(const Spec& spec);
  [[noreturn]] void fail(const std::string& what) const;
  ParsedArgs::Value convert(const std::string& name, const Spec& spec, const std::string& value) const;

  std::string command_;
  std::map<std::string, Spec> specs_;
};

}  // namespace finegemm::tools
