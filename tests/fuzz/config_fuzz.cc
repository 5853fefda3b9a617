// libFuzzer target for the config loader: arbitrary bytes must give a Config or a ConfigError — never a
// crash, hang, leak or sanitizer report. The first byte picks the load options (world size 1-8, unknown
// keys allowed, hidden size for "auto"); the rest is the JSON text. Whatever loads must also explain
// itself, and its effective JSON must load again to the same effective JSON.
#include <cstddef>
#include <cstdint>
#include <string>

#include "zerorun/runtime/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace rt = zerorun::runtime;
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  rt::LoadOptions options;
  options.world_size = 1 + (sel & 7);
  options.allow_unknown_keys = (sel & 8) != 0;
  options.hidden_size = (sel & 16) ? 1 + (sel >> 5) * 1000 : 0;
  options.log_warnings = false;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string effective;
  try {
    const rt::Config config = rt::LoadConfigString(text, options);
    effective = rt::EffectiveConfigJson(config);
    if ((sel & 32) && rt::ExplainConfig(config).empty()) __builtin_trap();
  } catch (const zerorun::ConfigError&) {
    return 0;
  }
  rt::LoadOptions again = options;
  again.allow_unknown_keys = false;
  try {
    const rt::Config reloaded = rt::LoadConfigString(effective, again);
    if (rt::EffectiveConfigJson(reloaded) != effective) __builtin_trap();  // not a fixed point
  } catch (const zerorun::ConfigError&) {
    __builtin_trap();  // the effective config of a valid config must be valid
  }
  return 0;
}
