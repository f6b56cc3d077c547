// The one exception hierarchy at zerocheck's API boundary.
//
// Every error the engine raises on purpose is a zero3::Error; the subclasses say which kind of
// promise was broken so callers (and the harness's oracles) can tell a rejected operation from a
// bug. Messages name the culprit: the JSON path, the module path and attribute, the rank.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace zero3 {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// X(class, when it is thrown): the specific errors, one table read by the class definitions
// below, `zerocheck` (schema export for the Python replay) and the docs.
#define ZERO3_ERROR_KINDS(X)                                                                       \
  X(ConfigError, "a config or scenario file that is malformed, has an unknown key, a wrong type "  \
                 "or a value out of range; the message starts with the JSON path")                 \
  X(AttributeCollision, "a write through a defining path onto an attribute name that already has " \
                        "an owner")                                                                \
  X(AlreadyInitialized, "initialize() on a model, submodule or optimizer that a live engine "      \
                        "already manages")                                                         \
  X(OptimizerMismatch, "the optimizer handed to initialize() does not cover exactly the model's "  \
                       "trainable parameters")                                                     \
  X(IllegalTransition, "a parameter asked to move between lifecycle states in an order the "       \
                       "schedule forbids")                                                         \
  X(CommError, "a collective that did not complete in time, or a peer rank that failed while "     \
               "this rank waited on it")                                                           \
  X(CheckpointError, "a checkpoint that is missing, incomplete, truncated or damaged (a size or "   \
                     "CRC-32C that differs from its manifest), of another model or optimizer "     \
                     "kind, or of an older format")                                                \
  X(PlacementError, "a placement policy that cannot be evaluated on a module (missing attribute, " \
                    "rank out of range)")                                                          \
  X(AttributeError, "an attribute name outside the accepted rule (see AttrDict), or a lookup of a " \
                    "missing name")                                                                \
  X(UsageError, "a misuse of the engine API (forward on a released engine, wrong route, ...)")

#define ZERO3_DECLARE_ERROR(name, doc) \
  class name : public Error {          \
   public:                             \
    using Error::Error;                \
  };
ZERO3_ERROR_KINDS(ZERO3_DECLARE_ERROR)
#undef ZERO3_DECLARE_ERROR

// Returns the table's name of the error class E: kind_name<AlreadyInitialized>() is
// "AlreadyInitialized", so code that names a kind cannot drift from the classes.
template <class E>
constexpr const char* kind_name();
#define ZERO3_KIND_NAME(name, doc) \
  template <>                      \
  constexpr const char* kind_name<name>() { return #name; }
ZERO3_ERROR_KINDS(ZERO3_KIND_NAME)
#undef ZERO3_KIND_NAME

// Returns the table's name for the kind of `e` ("AlreadyInitialized", ...), "Error" for a
// zero3::Error of no listed kind, and "" for an exception outside the hierarchy. The one way an
// error kind becomes a string: oracles, reports and worlds of processes all call this.
inline const char* error_kind(const std::exception& e) {
#define ZERO3_ERROR_KIND_OF(name, doc) \
  if (dynamic_cast<const name*>(&e) != nullptr) return #name;
  ZERO3_ERROR_KINDS(ZERO3_ERROR_KIND_OF)
#undef ZERO3_ERROR_KIND_OF
  return dynamic_cast<const Error*>(&e) != nullptr ? "Error" : "";
}

// Throws the error of kind `kind` (a name error_kind returns) with message `what`: how an error
// that crossed a process boundary as its kind and text is raised again as itself.
[[noreturn]] inline void throw_error_of_kind(std::string_view kind, const std::string& what) {
#define ZERO3_THROW_KIND(name, doc) \
  if (kind == #name) throw name(what);
  ZERO3_ERROR_KINDS(ZERO3_THROW_KIND)
#undef ZERO3_THROW_KIND
  throw Error(what);
}

}  // namespace zero3
