// HashStore (in-memory, condition-variable waits) and PrefixStore (key namespacing).
#include "zerorun/comm/store.h"

#include <charconv>

#include "zerorun/core/error.h"

namespace zerorun::comm {

namespace {

void CheckKey(const std::string& key, const std::string& where) {
  if (key.empty()) ZR_THROW(InvalidArgument, "{}: empty store key", where);
}

int64_t ParseCounter(const std::string& key, const std::string& value, const std::string& where) {
  if (value.empty()) return 0;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size()) {
    ZR_THROW(InvalidArgument, "{}: Add on key '{}' whose value is not an integer", where, key);
  }
  return v;
}

std::string JoinKeys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

}  // namespace

std::map<std::string, std::string> Store::GetExisting(const std::vector<std::string>& keys, Millis timeout) {
  std::map<std::string, std::string> out;
  for (const auto& k : keys) {
    if (Check({k})) out[k] = Get(k, timeout);
  }
  return out;
}

// ---- HashStore -------------------------------------------------------------------------------------

HashStore::HashStore() : state_(std::make_shared<State>()) {}

void HashStore::Set(const std::string& key, const std::string& value) {
  CheckKey(key, Describe());
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->kv[key] = value;
  state_->cv.notify_all();
}

std::string HashStore::Get(const std::string& key, Millis timeout) {
  CheckKey(key, Describe());
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->kv.count(key) > 0; })) {
    ZR_THROW(TimeoutError, "{}: timed out after {} ms waiting for key '{}'", Describe(), timeout.count(),
             key);
  }
  return state_->kv[key];
}

int64_t HashStore::Add(const std::string& key, int64_t delta) {
  CheckKey(key, Describe());
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->kv.find(key);
  int64_t v = (it == state_->kv.end() ? 0 : ParseCounter(key, it->second, Describe())) + delta;
  state_->kv[key] = std::to_string(v);
  state_->cv.notify_all();
  return v;
}

std::string HashStore::CompareSet(const std::string& key, const std::string& expected,
                                  const std::string& desired) {
  CheckKey(key, Describe());
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->kv.find(key);
  if (it == state_->kv.end()) {
    if (!expected.empty()) return "";
    state_->kv[key] = desired;
    state_->cv.notify_all();
    return desired;
  }
  if (it->second == expected) {
    it->second = desired;
    state_->cv.notify_all();
  }
  return it->second;
}

bool HashStore::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->kv.erase(key) > 0;
}

bool HashStore::Check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const auto& k : keys) {
    if (!state_->kv.count(k)) return false;
  }
  return true;
}

void HashStore::Wait(const std::vector<std::string>& keys, Millis timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  auto all = [&] {
    for (const auto& k : keys) {
      if (!state_->kv.count(k)) return false;
    }
    return true;
  };
  if (!state_->cv.wait_for(lock, timeout, all)) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!state_->kv.count(k)) missing.push_back(k);
    }
    ZR_THROW(TimeoutError, "{}: timed out after {} ms waiting for keys {}", Describe(), timeout.count(),
             JoinKeys(missing));
  }
}

int64_t HashStore::NumKeys() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return static_cast<int64_t>(state_->kv.size());
}

std::unique_ptr<Store> HashStore::Clone() {
  auto s = std::unique_ptr<HashStore>(new HashStore(state_));
  s->set_timeout(timeout());
  return s;
}

// ---- PrefixStore -----------------------------------------------------------------------------------

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  if (!base_) ZR_THROW(InvalidArgument, "PrefixStore '{}': null base store", prefix_);
  set_timeout(base_->timeout());
}

std::string PrefixStore::Key(const std::string& key) const {
  CheckKey(key, Describe());
  return prefix_ + "/" + key;
}

std::vector<std::string> PrefixStore::Keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(Key(k));
  return out;
}

void PrefixStore::Set(const std::string& key, const std::string& value) { base_->Set(Key(key), value); }
std::string PrefixStore::Get(const std::string& key, Millis timeout) { return base_->Get(Key(key), timeout); }
int64_t PrefixStore::Add(const std::string& key, int64_t delta) { return base_->Add(Key(key), delta); }
std::string PrefixStore::CompareSet(const std::string& key, const std::string& expected,
                                    const std::string& desired) {
  return base_->CompareSet(Key(key), expected, desired);
}
bool PrefixStore::Delete(const std::string& key) { return base_->Delete(Key(key)); }
bool PrefixStore::Check(const std::vector<std::string>& keys) { return base_->Check(Keys(keys)); }
void PrefixStore::Wait(const std::vector<std::string>& keys, Millis timeout) {
  base_->Wait(Keys(keys), timeout);
}
int64_t PrefixStore::NumKeys() { return base_->NumKeys(); }
void PrefixStore::SetOnDisconnect(const std::string& key, const std::string& value) {
  base_->SetOnDisconnect(Key(key), value);
}
void PrefixStore::ClearOnDisconnect() { base_->ClearOnDisconnect(); }
std::unique_ptr<Store> PrefixStore::Clone() {
  auto s = std::make_unique<PrefixStore>(prefix_, std::shared_ptr<Store>(base_->Clone()));
  s->set_timeout(timeout());
  return s;
}
std::map<std::string, std::string> PrefixStore::GetExisting(const std::vector<std::string>& keys, Millis timeout) {
  std::map<std::string, std::string> out;
  for (auto& [k, v] : base_->GetExisting(Keys(keys), timeout)) out[k.substr(prefix_.size() + 1)] = std::move(v);
  return out;
}
std::string PrefixStore::Describe() const { return base_->Describe() + " (prefix '" + prefix_ + "')"; }

}  // namespace zerorun::comm
