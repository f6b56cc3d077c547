// The one exception hierarchy at zerocheck's API boundary.
//
// Every error the engine raises on purpose is a zero3::Error; the subclasses say which kind of
// promise was broken so callers (and the harness's oracles) can tell a rejected operation from a
// bug. Messages name the culprit: the JSON path, the module path and attribute, the rank.
#pragma once

#include <stdexcept>
#include <string>

namespace zero3 {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A DeepSpeed-style config that is malformed, has an unknown key, a wrong type or a value out of
// range. The message starts with the JSON path ("zero_optimization.stage").
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A write through a defining path onto an attribute name that already has an owner.
class AttributeCollision : public Error {
 public:
  using Error::Error;
};

// initialize() on a model, submodule or optimizer that a live engine already manages.
class AlreadyInitialized : public Error {
 public:
  using Error::Error;
};

// The optimizer handed to initialize() does not cover exactly the model's trainable parameters.
class OptimizerMismatch : public Error {
 public:
  using Error::Error;
};

// A parameter was asked to move between lifecycle states in an order the schedule forbids.
class IllegalTransition : public Error {
 public:
  using Error::Error;
};

// A collective did not complete in time, or a peer rank failed while this rank waited on it.
class CommError : public Error {
 public:
  using Error::Error;
};

// A checkpoint that is missing, truncated, or written for another world size or layout.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// A placement policy that cannot be evaluated on a module (missing attribute, rank out of range).
class PlacementError : public Error {
 public:
  using Error::Error;
};

// An attribute name outside the accepted rule (see AttrDict), or a lookup of a missing name.
class AttributeError : public Error {
 public:
  using Error::Error;
};

// A misuse of the engine API (forward on a released engine, wrong route, ...).
class UsageError : public Error {
 public:
  using Error::Error;
};

}  // namespace zero3
