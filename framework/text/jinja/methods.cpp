#include "framework/text/jinja/methods.h"

#include <array>

#include "framework/text/jinja/render_budget.h"
#include "framework/text/jinja/string_format.h"
#include "framework/text/jinja/string_functions.h"

namespace chatflow::jinja {
namespace {

Value unsafe(const Value& self, std::string_view name) {
  Undefined undefined;
  undefined.message =
      std::make_shared<const std::string>("access to attribute '" + std::string(name) + "' of '" +
                                          type_name(self) + "' object is unsafe.");
  undefined.unsafe = true;
  return Value(std::move(undefined));
}

template <typename Function>
Value bind(std::string_view name, Function function) {
  return Value(Callable{std::string(name), std::move(function)});
}

const std::string* optional_string(const Arguments& arguments, size_t index,
                                   std::string_view name) {
  const Value* value = arguments.find(index, name);
  if (!value || value->is_none()) return nullptr;
  if (!value->is_string()) raise_type_error("expected a string, got " + type_name(*value));
  return &value->as_string();
}

int64_t optional_integer(const Arguments& arguments, size_t index, std::string_view name,
                         int64_t fallback) {
  const Value* value = arguments.find(index, name);
  if (!value || value->is_none()) return fallback;
  if (value->is_int()) return value->as_int();
  if (value->is_bool()) return value->as_bool();
  raise_type_error("'" + type_name(*value) + "' object cannot be interpreted as an integer");
}

const Value& required(const Arguments& arguments, size_t index, std::string_view method) {
  const Value* value = arguments.find(index, "");
  if (!value)
    raise_type_error(std::string(method) + "() takes at least " + std::to_string(index + 1) +
                     " argument");
  return *value;
}

Value list_of(std::vector<TrackedString> parts) {
  List list;
  list.items.reserve(parts.size());
  for (auto& part : parts)
    list.items.emplace_back(std::move(part));
  return Value(std::move(list));
}

// startswith/endswith take a string or a tuple of strings.
bool affix_matches(const std::string& text, const Value& affix, bool prefix) {
  auto one = [&](const Value& candidate) {
    if (!candidate.is_string())
      raise_type_error("startswith first arg must be str or a tuple of str");
    const std::string& a = candidate.as_string();
    if (a.size() > text.size()) return false;
    return prefix ? text.compare(0, a.size(), a) == 0
                  : text.compare(text.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const Value& candidate : affix.as_list().items) {
      if (one(candidate)) return true;
    }
    return false;
  }
  return one(affix);
}

std::optional<Value> string_method(const Value& self, std::string_view name) {
  const TrackedString& text = self.as_tracked();
  auto strip_method = [&](StripSide side) {
    return bind(name, [self, side](Arguments& arguments) {
      return Value(strip(self.as_tracked(), optional_string(arguments, 0, "chars"), side));
    });
  };
  if (name == "strip") return strip_method(StripSide::both);
  if (name == "lstrip") return strip_method(StripSide::left);
  if (name == "rstrip") return strip_method(StripSide::right);
  if (name == "split" || name == "rsplit") {
    bool from_right = name == "rsplit";
    return bind(name, [self, from_right](Arguments& arguments) {
      const std::string* separator = optional_string(arguments, 0, "sep");
      if (separator && separator->empty())
        throw RenderError(RenderError::Kind::value, "empty separator");
      int64_t max_splits = optional_integer(arguments, 1, "maxsplit", -1);
      return list_of(from_right ? rsplit(self.as_tracked(), separator, max_splits)
                                : split(self.as_tracked(), separator, max_splits));
    });
  }
  if (name == "splitlines") {
    return bind(name, [self](Arguments& arguments) {
      return list_of(
          split_lines(self.as_tracked(), truthy(arguments.get(0, "keepends", Value(false)))));
    });
  }
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return bind(name, [self, prefix](Arguments& arguments) {
      return Value(affix_matches(
          self.as_string(), required(arguments, 0, prefix ? "startswith" : "endswith"), prefix));
    });
  }
  if (name == "casefold")
    return bind(name, [self](Arguments&) { return Value(lower(self.as_tracked())); });
  if (name == "swapcase") {
    return bind(name, [self](Arguments&) {
      TrackedString out;
      for (const Value& character : iterate(self)) {
        const TrackedString& c = character.as_tracked();
        out.append(is_upper(c.text()) ? lower(c) : upper(c));
      }
      return Value(std::move(out));
    });
  }
  if (name == "ljust" || name == "rjust" || name == "center" || name == "zfill") {
    std::string which(name);
    return bind(name, [self, which](Arguments& arguments) {
      int64_t width = optional_integer(arguments, 0, "width", 0);
      std::string fill = which == "zfill" ? "0" : " ";
      if (const std::string* given = optional_string(arguments, 1, "fillchar")) fill = *given;
      auto size = static_cast<int64_t>(code_point_count(self.as_string()));
      if (size >= width) return self;
      auto missing = static_cast<size_t>(width - size);
      RenderBudget::check_bytes(self.as_string().size() +
                                missing * std::max<size_t>(fill.size(), 1));
      auto repeat = [&](size_t n) {
        std::string out;
        for (size_t i = 0; i < n; ++i)
          out += fill;
        return out;
      };
      const std::string& text = self.as_string();
      TrackedString out;
      if (which == "zfill" && !text.empty() && (text[0] == '-' || text[0] == '+')) {
        out.append_slice(self.as_tracked(), 0, 1);
        out.append(repeat(missing), false);
        out.append_slice(self.as_tracked(), 1, text.size());
        return Value(std::move(out));
      }
      // Python's center puts the odd fill character on the left when the width is odd.
      size_t left = which == "ljust"    ? 0
                    : which == "center" ? missing / 2 + (missing & static_cast<size_t>(width) & 1)
                                        : missing;
      out.append(repeat(left), false);
      out.append(self.as_tracked());
      out.append(repeat(missing - left), false);
      return Value(std::move(out));
    });
  }
  if (name == "partition" || name == "rpartition") {
    bool from_right = name == "rpartition";
    return bind(name, [self, from_right](Arguments& arguments) {
      const Value& separator = required(arguments, 0, "partition");
      if (!separator.is_string() || separator.as_string().empty())
        throw RenderError(RenderError::Kind::value, "empty separator");
      const std::string& s = self.as_string();
      size_t at = from_right ? s.rfind(separator.as_string()) : s.find(separator.as_string());
      const TrackedString& text = self.as_tracked();
      Value empty = Value::data_string("");
      if (at == std::string::npos) {
        return Value(from_right ? List{{empty, empty, self}, true, {}, {}}
                                : List{{self, empty, empty}, true, {}, {}});
      }
      size_t after = at + separator.as_string().size();
      return Value(List{{Value(text.slice(0, at)), Value(text.slice(at, after)),
                         Value(text.slice(after, s.size()))},
                        true,
                        {},
                        {}});
    });
  }
  if (name == "upper")
    return bind(name, [self](Arguments&) { return Value(upper(self.as_tracked())); });
  if (name == "lower")
    return bind(name, [self](Arguments&) { return Value(lower(self.as_tracked())); });
  if (name == "title")
    return bind(name, [self](Arguments&) { return Value(python_title(self.as_tracked())); });
  if (name == "capitalize")
    return bind(name, [self](Arguments&) { return Value(capitalize(self.as_tracked())); });
  if (name == "isupper")
    return bind(name, [self](Arguments&) { return Value(is_upper(self.as_string())); });
  if (name == "islower")
    return bind(name, [self](Arguments&) { return Value(is_lower(self.as_string())); });
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal" || name == "isalpha" ||
      name == "isalnum" || name == "isspace") {
    std::string which(name);
    return bind(name, [self, which](Arguments&) {
      const std::string& s = self.as_string();
      if (s.empty()) return Value(false);
      size_t offset = 0;
      while (offset < s.size()) {
        uint32_t c = next_code_point(s, offset);
        bool digit = c >= '0' && c <= '9';
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
        bool ok = which == "isspace"   ? is_python_space(c)
                  : which == "isalpha" ? alpha
                  : which == "isalnum" ? alpha || digit
                                       : digit;
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  if (name == "replace") {
    return bind(name, [self](Arguments& arguments) {
      const Value& old_text = required(arguments, 0, "replace");
      const Value& new_text = required(arguments, 1, "replace");
      if (!old_text.is_string() || !new_text.is_string())
        raise_type_error("replace() arguments must be str");
      return Value(replace(self.as_tracked(), old_text.as_string(), new_text.as_tracked(),
                           optional_integer(arguments, 2, "count", -1)));
    });
  }
  if (name == "format") {
    return bind(name, [self](Arguments& arguments) {
      return Value(brace_format(self.as_tracked(), arguments));
    });
  }
  if (name == "join") {
    return bind(name, [self](Arguments& arguments) {
      TrackedString out;
      bool first = true;
      for (const Value& item : iterate(required(arguments, 0, "join"))) {
        if (!item.is_string())
          raise_type_error("sequence item: expected str instance, " + type_name(item) + " found");
        if (!first) out.append(self.as_tracked());
        first = false;
        out.append(item.as_tracked());
      }
      return Value(std::move(out));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    std::string which(name);
    return bind(name, [self, which](Arguments& arguments) {
      const Value& needle = required(arguments, 0, which);
      if (!needle.is_string()) raise_type_error("must be str, not " + type_name(needle));
      const std::string& s = self.as_string();
      const std::string& n = needle.as_string();
      if (which == "count") {
        if (n.empty()) return Value(static_cast<int64_t>(code_point_count(s) + 1));
        int64_t count = 0;
        for (size_t at = s.find(n); at != std::string::npos; at = s.find(n, at + n.size()))
          ++count;
        return Value(count);
      }
      size_t at = which[0] == 'r' ? s.rfind(n) : s.find(n);
      if (at == std::string::npos) {
        if (which == "index" || which == "rindex")
          throw RenderError(RenderError::Kind::value, "substring not found");
        return Value(int64_t{-1});
      }
      return Value(static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, at))));
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool prefix = name == "removeprefix";
    return bind(name, [self, prefix](Arguments& arguments) {
      const Value& affix = required(arguments, 0, prefix ? "removeprefix" : "removesuffix");
      if (!affix.is_string()) raise_type_error("argument must be str");
      const std::string& s = self.as_string();
      const std::string& a = affix.as_string();
      if (!affix_matches(s, affix, prefix)) return self;
      return Value(prefix ? self.as_tracked().slice(a.size(), s.size())
                          : self.as_tracked().slice(0, s.size() - a.size()));
    });
  }
  (void)text;
  return std::nullopt;
}

Value items_of(const Dict& dict) {
  List list;
  list.items.reserve(dict.entries.size());
  for (const auto& [key, value] : dict.entries)
    list.items.emplace_back(List{{key, value}, true, {}, {}});
  return make_iterator(std::move(list.items), "dict_items");
}

std::optional<Value> dict_method(const Value& self, std::string_view name) {
  if (name == "items") return bind(name, [self](Arguments&) { return items_of(self.as_dict()); });
  if (name == "keys" || name == "values") {
    bool keys = name == "keys";
    return bind(name, [self, keys](Arguments&) {
      List list;
      for (const auto& [key, value] : self.as_dict().entries)
        list.items.push_back(keys ? key : value);
      return make_iterator(std::move(list.items), keys ? "dict_keys" : "dict_values");
    });
  }
  if (name == "get") {
    return bind(name, [self](Arguments& arguments) {
      const Value& key = required(arguments, 0, "get");
      if (const Value* value = self.as_dict().find(key)) return *value;
      return arguments.get(1, "default", Value(None{}));
    });
  }
  if (name == "copy") return bind(name, [self](Arguments&) { return Value(self.as_dict()); });
  static constexpr std::array<std::string_view, 6> mutating = {"pop",    "popitem", "setdefault",
                                                               "update", "clear",   "__setitem__"};
  for (std::string_view candidate : mutating) {
    if (candidate == name) return unsafe(self, name);
  }
  return std::nullopt;
}

std::optional<Value> list_method(const Value& self, std::string_view name) {
  if (!self.as_list().iterator_type.empty()) return std::nullopt;  // generators, dict views
  if (name == "count") {
    return bind(name, [self](Arguments& arguments) {
      const Value& needle = required(arguments, 0, "count");
      int64_t count = 0;
      for (const Value& item : self.as_list().items)
        count += equal(item, needle);
      return Value(count);
    });
  }
  if (name == "index") {
    return bind(name, [self](Arguments& arguments) {
      const Value& needle = required(arguments, 0, "index");
      const auto& items = self.as_list().items;
      for (size_t i = 0; i < items.size(); ++i) {
        if (equal(items[i], needle)) return Value(static_cast<int64_t>(i));
      }
      throw RenderError(RenderError::Kind::value, repr(needle) + " is not in list");
    });
  }
  if (name == "copy" && !self.as_list().tuple)
    return bind(name, [self](Arguments&) { return Value(self.as_list()); });
  if (self.as_list().tuple) return std::nullopt;
  static constexpr std::array<std::string_view, 8> mutating = {
      "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  for (std::string_view candidate : mutating) {
    if (candidate == name) return unsafe(self, name);
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> find_method(const Value& self, std::string_view name) {
  if (self.is_string()) return string_method(self, name);
  if (self.is_dict()) return dict_method(self, name);
  if (self.is_list()) return list_method(self, name);
  return std::nullopt;
}

}  // namespace chatflow::jinja
