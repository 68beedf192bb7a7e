#include "framework/text/jinja/globals.h"

#include <algorithm>
#include <ctime>

#include "framework/text/jinja/interpreter.h"
#include "framework/text/jinja/render_budget.h"

namespace chatflow::jinja {
namespace {

// jinja2's namespace(): the one object whose attributes a template may assign.
class NamespaceObject final : public Object {
 public:
  std::string_view type_name() const override { return "Namespace"; }
  std::optional<Value> attribute(std::string_view name) const override {
    if (const Value* value = attributes_.find(name)) return *value;
    return std::nullopt;
  }
  bool set_attribute(std::string_view name, const Value& value) override {
    int nesting = std::max(nesting_, nesting_of(value) + 1);
    RenderBudget::check_nesting(nesting);
    nesting_ = nesting;
    attributes_.set(Value::data_string(std::string(name)), value);
    return true;
  }
  int nesting() const override { return nesting_; }
  void release_values() override { attributes_.entries.clear(); }

 private:
  Dict attributes_;
  int nesting_ = 1;
};

int64_t integer_argument(const Value& value) {
  if (value.is_int()) return value.as_int();
  if (value.is_bool()) return value.as_bool();
  if (value.is_undefined()) raise_undefined(value);
  raise_type_error("'" + type_name(value) + "' object cannot be interpreted as an integer");
}

Value range(Arguments& arguments) {
  const auto& positional = arguments.positional;
  if (positional.empty() || positional.size() > 3)
    raise_type_error("range expected 1 to 3 arguments, got " + std::to_string(positional.size()));
  int64_t start = 0, stop = 0, step = 1;
  if (positional.size() == 1) {
    stop = integer_argument(positional[0]);
  } else {
    start = integer_argument(positional[0]);
    stop = integer_argument(positional[1]);
    if (positional.size() == 3) step = integer_argument(positional[2]);
  }
  if (step == 0) throw RenderError(RenderError::Kind::value, "range() arg 3 must not be zero");
  List list;
  constexpr int64_t kMaxRange = 100000;  // the sandbox's MAX_RANGE
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(list.items.size()) >= kMaxRange)
      throw RenderError(RenderError::Kind::security,
                        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    list.items.emplace_back(i);
  }
  return Value(std::move(list));
}

Value make_namespace(Arguments& arguments) {
  auto object = std::make_shared<NamespaceObject>();
  RenderBudget::adopt(object);
  for (const Value& initial : arguments.positional) {
    if (!initial.is_dict()) raise_type_error("namespace() takes a mapping as positional argument");
    for (const auto& [key, value] : initial.as_dict().entries)
      object->set_attribute(to_text(key), value);
  }
  for (auto& [key, value] : arguments.keyword)
    object->set_attribute(key, value);
  return Value(std::static_pointer_cast<Object>(object));
}

Value make_dict(Arguments& arguments) {
  Dict dict;
  for (const Value& initial : arguments.positional) {
    if (initial.is_dict()) {
      for (const auto& [key, value] : initial.as_dict().entries)
        dict.set(key, value);
    }
  }
  for (auto& [key, value] : arguments.keyword)
    dict.set(Value::data_string(key), value);
  return Value(std::move(dict));
}

// joiner(sep): '' on its first call, the separator on every later one.
Value make_joiner(Arguments& arguments) {
  Value separator = arguments.get(0, "sep", Value::template_string(", "));
  auto used = std::make_shared<bool>(false);
  return Value(Callable{"joiner", [separator, used](Arguments&) -> Value {
                          if (!*used) {
                            *used = true;
                            return Value::template_string("");
                          }
                          return separator;
                        }});
}

// cycler(a, b, ...): .next() returns the items in turn, .current the coming one, .reset().
class CyclerObject final : public Object {
 public:
  explicit CyclerObject(std::vector<Value> items) : items_(std::move(items)) {}
  std::string_view type_name() const override { return "Cycler"; }
  std::optional<Value> attribute(std::string_view name) const override {
    if (name == "current") return items_.empty() ? Value(None{}) : items_[*position_];
    auto position = position_;
    auto items = items_;
    if (name == "next") {
      return Value(Callable{"next", [position, items](Arguments&) -> Value {
                              if (items.empty()) raise_type_error("cycler has no items");
                              Value item = items[*position];
                              *position = (*position + 1) % items.size();
                              return item;
                            }});
    }
    if (name == "reset") {
      return Value(Callable{"reset", [position](Arguments&) -> Value {
                              *position = 0;
                              return Value(None{});
                            }});
    }
    return std::nullopt;
  }

 private:
  std::vector<Value> items_;
  std::shared_ptr<size_t> position_ = std::make_shared<size_t>(0);
};

Value make_cycler(Arguments& arguments) {
  return Value(
      std::static_pointer_cast<Object>(std::make_shared<CyclerObject>(arguments.positional)));
}

Value raise_exception(Arguments& arguments) {
  std::string message = arguments.positional.empty() ? "" : to_text(arguments.positional[0]);
  throw RenderError(RenderError::Kind::template_error, message);
}

std::tm local_now() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  return local;
}

}  // namespace

std::optional<Value> find_global(std::string_view name, const Environment& environment) {
  if (name == "range") return Value(Callable{"range", range});
  if (name == "namespace") return Value(Callable{"namespace", make_namespace});
  if (name == "dict") return Value(Callable{"dict", make_dict});
  if (name == "joiner") return Value(Callable{"joiner", make_joiner});
  if (name == "cycler") return Value(Callable{"cycler", make_cycler});
  if (name == "raise_exception") return Value(Callable{"raise_exception", raise_exception});
  if (name == "strftime_now") {
    return Value(
        Callable{"strftime_now", [&environment](Arguments& arguments) -> Value {
                   if (arguments.positional.empty() || !arguments.positional[0].is_string())
                     raise_type_error("strftime_now() takes a format string");
                   std::tm now = environment.now ? environment.now() : local_now();
                   char buffer[512];
                   size_t written = std::strftime(
                       buffer, sizeof buffer, arguments.positional[0].as_string().c_str(), &now);
                   return Value::data_string(std::string(buffer, written));
                 }});
  }
  return std::nullopt;
}

}  // namespace chatflow::jinja
