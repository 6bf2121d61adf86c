#include "tokenizer/post_processor.h"

#include <fmt/format.h>

#include <map>

#include "core/error.h"

namespace nextn::tok {

namespace {

void parse_into(const Field& f, PostProcessor& p) {
  const std::string t = f.type({"TemplateProcessing", "ByteLevel", "Sequence"});
  if (t == "ByteLevel") {
    for (const char* k : {"add_prefix_space", "trim_offsets", "use_regex"}) f.bool_or(k, false);  // offsets only
    return;
  }
  if (t == "Sequence") {
    for (const auto& s : f.at("processors").items()) parse_into(s, p);
    return;
  }
  if (p.has_template) f.fail("a second TemplateProcessing is not supported");
  std::map<std::string, std::vector<int32_t>> specials;
  for (const auto& [name, st] : f.at("special_tokens").members()) {
    const Field idf = st.at("id");
    if (idf.str() != name)
      idf.fail(fmt::format("'{}' differs from its key '{}'", printable(idf.str()), printable(name)));
    std::vector<int32_t> ids;
    for (const auto& i : st.at("ids").items()) ids.push_back(int32_t(i.u32()));
    const auto toks = st.at("tokens").items();
    if (toks.size() != ids.size()) st.fail("\"ids\" and \"tokens\" differ in length");
    for (const auto& tk : toks) tk.str();
    specials[name] = ids;
  }
  f.at("pair").items();  // pairs are not encoded; the field is checked to be an array
  p.has_template = true;
  int sequences = 0;
  for (const auto& piece : f.at("single").items()) {
    const auto& j = piece.json();
    if (!j.is_object() || j.size() != 1) piece.fail("must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    if (auto s = piece.get("SpecialToken")) {
      const std::string& name = s->at("id").str();
      s->at("type_id").u32();
      auto it = specials.find(name);
      if (it == specials.end()) s->at("id").fail(fmt::format("'{}' is not in special_tokens", printable(name)));
      p.single.insert(p.single.end(), it->second.begin(), it->second.end());
    } else if (auto q = piece.get("Sequence")) {
      if (q->at("id").str() != "A") q->at("id").fail("a single-sequence template can only use sequence A");
      q->at("type_id").u32();
      p.single.push_back(-1);
      ++sequences;
    } else {
      piece.fail("must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
  }
  if (sequences != 1) f.at("single").fail(fmt::format("uses sequence A {} times, not once", sequences));
}

}  // namespace

PostProcessor parse_post_processor(const Field& f) {
  PostProcessor p;
  parse_into(f, p);
  return p;
}

std::vector<int32_t> post_process(const PostProcessor& p, const std::vector<int32_t>& ids) {
  if (!p.has_template) return ids;
  std::vector<int32_t> out;
  for (int32_t t : p.single) {
    if (t >= 0)
      out.push_back(t);
    else
      out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

}  // namespace nextn::tok
