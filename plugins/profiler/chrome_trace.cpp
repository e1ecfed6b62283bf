// Chrome Trace Event Format writer (see chrome_trace.h).
#include "chrome_trace.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

namespace accel::profiler {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_us(double ns) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.3f", ns / 1000.0);
  return buffer;
}

namespace {

std::string json_number(double value) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

// "key=value; key=value" as JSON members (values as strings), skipping the
// operator shapes unless asked.
void append_detail(std::string& args, const std::string& detail, bool shapes) {
  size_t pos = 0;
  while (pos < detail.size()) {
    size_t end = detail.find("; ", pos);
    if (end == std::string::npos) end = detail.size();
    const std::string item = detail.substr(pos, end - pos);
    pos = end + 2;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      args += ",\"detail\":" + json_string(item);
      continue;
    }
    const std::string key = item.substr(0, eq);
    if (!shapes && (key == "shapes" || key == "dtypes")) continue;
    args += "," + json_string(key == "shapes" ? "Input Dims" : key == "dtypes" ? "Input type" : key) + ":" +
            json_string(item.substr(eq + 1));
  }
}

std::string common_args(const Event& e, const TraceStyle& style, int32_t unit) {
  std::string args = "\"step\":" + std::to_string(e.step);
  if (e.unit >= 0) args += ",\"unit\":" + std::to_string(e.unit);
  if (e.micro_batch >= 0) args += ",\"micro_batch\":" + std::to_string(e.micro_batch);
  if (e.bytes != 0) args += ",\"bytes\":" + std::to_string(e.bytes);
  if (!e.source.empty() && e.source != "host") args += ",\"source\":" + json_string(e.source);
  if (style.with_modules && unit >= 0 && static_cast<size_t>(unit) < style.unit_names.size()) {
    args += ",\"module\":" + json_string("gpt." + style.unit_names[static_cast<size_t>(unit)]);
  }
  return args;
}

}  // namespace

std::string trace_events_json(const Timeline& t, const TraceStyle& style) {
  // Points and slices merged in time order (a slice before a point at the
  // same instant).
  struct Item {
    double ts;
    bool is_slice;
    size_t index;
  };
  std::vector<Item> items;
  items.reserve(t.slices.size() + t.points.size());
  for (size_t i = 0; i < t.slices.size(); ++i) items.push_back({style.to_trace_ns(t.slices[i].ts_ns), true, i});
  for (size_t p : t.points) items.push_back({style.to_trace_ns(t.events[p].ts_ns), false, p});
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    return a.is_slice && !b.is_slice;
  });

  const std::string pid = std::to_string(style.rank);
  std::string out;
  const auto add = [&](const std::string& event) {
    if (!out.empty()) out += ",\n";
    out += event;
  };
  add("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":\"rank " + pid +
      "\"}}");
  add("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"sort_index\":" + pid +
      "}}");
  std::set<uint64_t> tracks;
  for (const Slice& s : t.slices) tracks.insert(s.track);
  for (uint64_t track : tracks) {
    const std::string name = track >= 1000000u ? "stream " + std::to_string(track - 1000000u)
                                               : "thread " + std::to_string(track);
    add("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" + std::to_string(track) +
        ",\"args\":{\"name\":" + json_string(name) + "}}");
  }
  for (const Item& item : items) {
    if (item.is_slice) {
      const Slice& s = t.slices[item.index];
      const Event& e = t.begin_of(s);
      const double end = style.to_trace_ns(s.ts_ns + s.dur_ns);
      std::string args = common_args(e, style, s.unit);
      const bool is_operator = e.category == "operator";
      append_detail(args, e.detail, !is_operator || style.record_shapes);
      if (style.with_stack) args += ",\"stack\":" + json_string(t.stack_of(item.index));
      if (style.with_flops && s.flops > 0.0) args += ",\"flops\":" + json_number(s.flops);
      add("{\"ph\":\"X\",\"name\":" + json_string(e.name) + ",\"cat\":" + json_string(e.category) +
          ",\"ts\":" + json_us(item.ts) + ",\"dur\":" + json_us(std::max(0.0, end - item.ts)) + ",\"pid\":" + pid +
          ",\"tid\":" + std::to_string(s.track) + ",\"args\":{" + args + "}}");
    } else {
      const Event& e = t.events[item.index];
      if (e.type == ACCEL_TRACE_COUNTER) {
        add("{\"ph\":\"C\",\"name\":" + json_string(e.source == "host" ? e.name : e.source + "." + e.name) +
            ",\"cat\":" + json_string(e.category) + ",\"ts\":" + json_us(item.ts) + ",\"pid\":" + pid +
            ",\"tid\":" + std::to_string(e.thread) + ",\"args\":{\"value\":" + json_number(e.value) + "}}");
      } else {
        std::string args = common_args(e, style, e.unit);
        append_detail(args, e.detail, true);
        add("{\"ph\":\"i\",\"s\":\"t\",\"name\":" + json_string(e.name) + ",\"cat\":" + json_string(e.category) +
            ",\"ts\":" + json_us(item.ts) + ",\"pid\":" + pid + ",\"tid\":" + std::to_string(e.thread) +
            ",\"args\":{" + args + "}}");
      }
    }
  }
  return out;
}

std::string trace_document(const std::vector<std::string>& fragments, const std::string& other_data_json) {
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  for (const std::string& f : fragments) {
    if (f.empty()) continue;
    if (!first) out += ",\n";
    out += f;
    first = false;
  }
  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":" + (other_data_json.empty() ? "{}" : other_data_json) +
         "}\n";
  return out;
}

bool write_file_atomically(const std::string& path, const std::string& text, std::string* error) {
  const std::string temporary = path + ".tmp";
  std::FILE* f = std::fopen(temporary.c_str(), "wb");
  if (f == nullptr) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(temporary.c_str(), path.c_str()) != 0) {
    *error = path + ": " + std::strerror(errno);
    std::remove(temporary.c_str());
    return false;
  }
  return true;
}

}  // namespace accel::profiler
