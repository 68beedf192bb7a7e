#include "framework/text/jinja/string_format.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "framework/text/jinja/interpreter.h"
#include "framework/text/jinja/render_budget.h"
#include "framework/text/jinja/string_functions.h"

namespace chatflow::jinja {
namespace {

struct Spec {
  char fill = ' ';
  char align = '\0';  // '<', '>', '^', '=' or none
  char sign = '-';
  bool alternate = false;
  bool zero = false;
  int width = -1;
  int precision = -1;
  char type = '\0';
};

[[noreturn]] void value_error(const std::string& message) {
  throw RenderError(RenderError::Kind::value, message);
}

// A width or precision read digit by digit, held below overflow (what it asks for is then
// checked against the render's budget).
int with_digit(int value, char digit) {
  constexpr int kLargest = 1'000'000'000;
  int64_t next = int64_t{std::max(value, 0)} * 10 + (digit - '0');
  return static_cast<int>(std::min<int64_t>(next, kLargest));
}

std::string pad(std::string text, const Spec& spec, char default_align) {
  size_t length = code_point_count(text);
  if (spec.width < 0 || length >= static_cast<size_t>(spec.width)) return text;
  size_t missing = static_cast<size_t>(spec.width) - length;
  RenderBudget::check_bytes(text.size() + missing);
  char align = spec.align ? spec.align : default_align;
  std::string fill(1, spec.fill);
  auto repeat = [&](size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i)
      out += fill;
    return out;
  };
  if (align == '<') return text + repeat(missing);
  if (align == '^') return repeat(missing / 2) + text + repeat(missing - missing / 2);
  if (align == '=' && !text.empty() && (text[0] == '-' || text[0] == '+'))
    return text.substr(0, 1) + repeat(missing) + text.substr(1);
  return repeat(missing) + text;
}

std::string format_number(const Value& value, const Spec& spec) {
  char type = spec.type;
  if (!value.is_number()) {
    if (value.is_undefined()) raise_undefined(value);
    raise_type_error(std::string("%") + type + " format: a real number is required, not " +
                     type_name(value));
  }
  std::string body;
  double number = value.as_number();
  bool negative = false;
  if (type == 'd' || type == 'i' || type == 'x' || type == 'X' || type == 'o') {
    int64_t integer = value.is_float() ? static_cast<int64_t>(std::trunc(number))
                                       : (value.is_bool() ? value.as_bool() : value.as_int());
    negative = integer < 0;
    uint64_t magnitude =
        negative ? static_cast<uint64_t>(-(integer + 1)) + 1 : static_cast<uint64_t>(integer);
    char buffer[32];
    const char* format = type == 'x'   ? "%llx"
                         : type == 'X' ? "%llX"
                         : type == 'o' ? "%llo"
                                       : "%llu";
    std::snprintf(buffer, sizeof buffer, format, static_cast<unsigned long long>(magnitude));
    body = buffer;
  } else {
    negative = std::signbit(number);
    char buffer[512];
    int precision = spec.precision < 0 ? 6 : spec.precision;
    char c_type = type == 'F' ? 'F' : type;
    char format[16];
    std::snprintf(format, sizeof format, "%%.%d%c", precision, c_type);
    std::snprintf(buffer, sizeof buffer, format, std::fabs(number));
    body = buffer;
  }
  std::string sign = negative ? "-" : (spec.sign == '+' ? "+" : (spec.sign == ' ' ? " " : ""));
  if (spec.zero && spec.width > 0 && !spec.align &&
      sign.size() + body.size() < static_cast<size_t>(spec.width)) {
    RenderBudget::check_bytes(static_cast<size_t>(spec.width));
    body.insert(0, static_cast<size_t>(spec.width) - sign.size() - body.size(), '0');
  }
  return sign + body;
}

// One conversion of `%` formatting: the spec after '%'.
std::string percent_convert(const Value& value, const Spec& spec) {
  switch (spec.type) {
    case 's': {
      std::string text = to_text(value);
      if (spec.precision >= 0) {
        auto offsets = code_point_offsets(text);
        if (static_cast<size_t>(spec.precision) + 1 < offsets.size())
          text = text.substr(0, offsets[spec.precision]);
      }
      return pad(text, spec, '>');
    }
    case 'r':
    case 'a':
      return pad(repr(value), spec, '>');
    case 'c':
      return pad(
          value.is_string() ? value.as_string() : std::string(1, static_cast<char>(value.as_int())),
          spec, '>');
    case 'd':
    case 'i':
    case 'x':
    case 'X':
    case 'o':
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
      return pad(format_number(value, spec), spec, '>');
    default:
      value_error(std::string("unsupported format character '") + spec.type + "'");
  }
}

}  // namespace

TrackedString percent_format(const TrackedString& format, const Value& arguments) {
  const std::string& text = format.text();
  std::vector<Value> positional;
  if (arguments.is_list() && arguments.as_list().tuple)
    positional = arguments.as_list().items;
  else
    positional.push_back(arguments);
  bool mapping = arguments.is_dict();
  size_t next_argument = 0;
  TrackedString out;
  size_t literal_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') continue;
    out.append_slice(format, literal_start, i);
    if (i + 1 >= text.size()) value_error("incomplete format");
    size_t j = i + 1;
    if (text[j] == '%') {
      out.append_slice(format, j, j + 1);
      literal_start = i = j;
      ++literal_start;
      continue;
    }
    Value argument;
    bool have_argument = false;
    if (text[j] == '(') {
      size_t close = text.find(')', j);
      if (close == std::string::npos) value_error("incomplete format key");
      std::string key = text.substr(j + 1, close - j - 1);
      if (!mapping) raise_type_error("format requires a mapping");
      const Value* found = arguments.as_dict().find(std::string_view(key));
      if (!found) throw RenderError(RenderError::Kind::value, "'" + key + "'");
      argument = *found;
      have_argument = true;
      j = close + 1;
    }
    Spec spec;
    for (; j < text.size(); ++j) {
      char c = text[j];
      if (c == '-')
        spec.align = '<';
      else if (c == '+')
        spec.sign = '+';
      else if (c == ' ')
        spec.sign = spec.sign == '+' ? '+' : ' ';
      else if (c == '#')
        spec.alternate = true;
      else if (c == '0')
        spec.zero = true;
      else
        break;
    }
    if (spec.align) spec.zero = false;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])))
      spec.width = with_digit(spec.width, text[j++]);
    if (j < text.size() && text[j] == '.') {
      spec.precision = 0;
      ++j;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])))
        spec.precision = with_digit(spec.precision, text[j++]);
    }
    if (j >= text.size()) value_error("incomplete format");
    spec.type = text[j];
    if (!have_argument) {
      if (mapping && positional.size() == 1) {
        argument = arguments;
      } else {
        if (next_argument >= positional.size())
          raise_type_error("not enough arguments for format string");
        argument = positional[next_argument++];
      }
    }
    TrackedString piece =
        spec.type == 's' && argument.is_string() && spec.width < 0 && spec.precision < 0
            ? argument.as_tracked()
            : TrackedString::from_data(percent_convert(argument, spec));
    out.append(format.is_markup() ? html_escape(piece) : piece);
    i = j;
    literal_start = j + 1;
  }
  out.append_slice(format, literal_start, text.size());
  if (!mapping && next_argument < positional.size())
    raise_type_error("not all arguments converted during string formatting");
  out.set_markup(format.is_markup());
  return out;
}

TrackedString brace_format(const TrackedString& format, const Arguments& arguments) {
  const std::string& text = format.text();
  TrackedString out;
  size_t literal_start = 0;
  size_t automatic = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '}') {
      if (i + 1 < text.size() && text[i + 1] == '}') {
        out.append_slice(format, literal_start, i + 1);
        literal_start = ++i + 1;
        continue;
      }
      value_error("Single '}' encountered in format string");
    }
    if (c != '{') continue;
    if (i + 1 < text.size() && text[i + 1] == '{') {
      out.append_slice(format, literal_start, i + 1);
      literal_start = ++i + 1;
      continue;
    }
    out.append_slice(format, literal_start, i);
    size_t close = text.find('}', i);
    if (close == std::string::npos) value_error("expected '}' before end of string");
    std::string field = text.substr(i + 1, close - i - 1);
    std::string spec_text;
    char conversion = '\0';
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec_text = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : '\0';
      field = field.substr(0, bang);
    }
    // field: [name or index](.attribute | [key])*
    size_t name_end = field.find_first_of(".[");
    std::string head = field.substr(0, name_end);
    Value value;
    if (head.empty()) {
      if (automatic >= arguments.positional.size())
        throw RenderError(RenderError::Kind::value, "Replacement index " +
                                                        std::to_string(automatic) +
                                                        " out of range for positional args tuple");
      value = arguments.positional[automatic++];
    } else if (std::isdigit(static_cast<unsigned char>(head[0]))) {
      size_t index = std::stoul(head);
      if (index >= arguments.positional.size())
        throw RenderError(RenderError::Kind::value,
                          "Replacement index " + head + " out of range for positional args tuple");
      value = arguments.positional[index];
    } else {
      const Value* found = nullptr;
      for (const auto& [key, item] : arguments.keyword) {
        if (key == head) found = &item;
      }
      if (!found) throw RenderError(RenderError::Kind::value, "'" + head + "'");
      value = *found;
    }
    size_t position = name_end;
    while (position != std::string::npos && position < field.size()) {
      if (field[position] == '.') {
        size_t end = field.find_first_of(".[", position + 1);
        value = get_attribute(value, field.substr(position + 1, end - position - 1));
        position = end;
      } else {
        size_t end = field.find(']', position);
        std::string key = field.substr(position + 1, end - position - 1);
        Value key_value = !key.empty() && std::isdigit(static_cast<unsigned char>(key[0]))
                              ? Value(static_cast<int64_t>(std::stoll(key)))
                              : Value::data_string(key);
        value = get_item(value, key_value);
        position = end == std::string::npos ? end : end + 1;
      }
    }
    if (conversion == 'r' || conversion == 'a')
      value = Value::data_string(repr(value));
    else if (conversion == 's')
      value = Value(to_tracked(value));
    Spec spec;
    size_t k = 0;
    if (spec_text.size() >= 2 && std::string("<>^=").find(spec_text[1]) != std::string::npos) {
      spec.fill = spec_text[0];
      spec.align = spec_text[1];
      k = 2;
    } else if (!spec_text.empty() && std::string("<>^=").find(spec_text[0]) != std::string::npos) {
      spec.align = spec_text[0];
      k = 1;
    }
    if (k < spec_text.size() && (spec_text[k] == '+' || spec_text[k] == '-' || spec_text[k] == ' '))
      spec.sign = spec_text[k++];
    if (k < spec_text.size() && spec_text[k] == '0') {
      spec.zero = true;
      ++k;
    }
    while (k < spec_text.size() && std::isdigit(static_cast<unsigned char>(spec_text[k])))
      spec.width = with_digit(spec.width, spec_text[k++]);
    if (k < spec_text.size() && spec_text[k] == '.') {
      spec.precision = 0;
      ++k;
      while (k < spec_text.size() && std::isdigit(static_cast<unsigned char>(spec_text[k])))
        spec.precision = with_digit(spec.precision, spec_text[k++]);
    }
    if (k < spec_text.size()) spec.type = spec_text[k];
    if (spec_text.empty() && value.is_string()) {
      out.append(value.as_tracked());
    } else if (spec.type == '\0' || spec.type == 's') {
      if (spec.type == '\0' && value.is_number() && !spec_text.empty()) {
        out.append(pad(to_text(value), spec, '>'), false);
      } else {
        std::string rendered = to_text(value);
        if (spec.precision >= 0) {
          auto offsets = code_point_offsets(rendered);
          if (static_cast<size_t>(spec.precision) + 1 < offsets.size())
            rendered = rendered.substr(0, offsets[spec.precision]);
        }
        out.append(pad(rendered, spec, '<'), false);
      }
    } else {
      if (spec.zero && !spec.align) {
        spec.align = '=';
        spec.fill = '0';
        spec.zero = false;
      }
      out.append(pad(format_number(value, spec), spec, '>'), false);
    }
    i = close;
    literal_start = close + 1;
  }
  out.append_slice(format, literal_start, text.size());
  return out;
}

}  // namespace chatflow::jinja
