// Stop strings on the detokenized text, streaming-safe: text is released
// only once no stop string can still begin inside it, so a client never sees
// a partial stop string, and the output ends just before the first match
// (the stop string itself is not included, as OpenAI does).
#pragma once
#include <string>
#include <vector>

namespace nextn {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);  // empty strings are ignored
  // Appends `text`; returns the text that is now safe to release. After a
  // match, stopped() is true and later calls return "".
  std::string feed(const std::string& text);
  // The text still held back (no stop string can match any more: the stream ended).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace nextn
