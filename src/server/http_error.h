// An error a request earns, with its HTTP status and OpenAI's error shape:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace nextn::server {

class HttpError : public Error {
 public:
  HttpError(int status, std::string message, std::string param = "", std::string code = "")
      : Error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_, code_;
};

// OpenAI's error type for a status: invalid_request_error (4xx), server_error (5xx).
inline const char* error_type(int status) {
  if (status == 404) return "not_found_error";
  if (status == 413) return "invalid_request_error";
  if (status == 429) return "rate_limit_error";
  return status >= 500 ? "server_error" : "invalid_request_error";
}

inline nlohmann::ordered_json error_json(int status, const std::string& message, const std::string& param = "",
                                         const std::string& code = "") {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = error_type(status);
  e["param"] = param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param);
  e["code"] = code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code);
  return {{"error", e}};
}

}  // namespace nextn::server
