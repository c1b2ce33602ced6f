// Auth: token file parsing, join admission (tokens, open joins, rate and worker limits),
// session keys, revocation on reload, stream slots and push attempts per round.
#include "server/auth.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"

namespace muloco {
namespace {

const std::string kTokA = "aaaaaaaaaaaaaaaa1111";  // 20 characters
const std::string kTokB = "bbbbbbbbbbbbbbbb2222";
const std::string kTokC = "cccccccccccccccc3333";

// A fresh directory under the test temp dir, removed (with its token file) at the end.
class TokenDir {
 public:
  TokenDir() {
    std::string tmpl = std::string(::testing::TempDir()) + "/muloco_auth_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const char* made = mkdtemp(buf.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed for " << tmpl;
    dir_ = made ? made : tmpl;
    path_ = dir_ + "/tokens";
  }
  ~TokenDir() {
    std::remove(path_.c_str());
    rmdir(dir_.c_str());
  }
  void Write(const std::string& text) const {
    std::ofstream out(path_, std::ios::trunc);
    out << text;
    out.close();
    ASSERT_TRUE(out.good()) << "cannot write " << path_;
  }
  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, path_;
};

std::string TwoTokens() { return "alice " + kTokA + "\nbob " + kTokB + "\n"; }

std::unique_ptr<Auth> MustCreate(AuthOptions o, const Clock* clock) {
  absl::StatusOr<std::unique_ptr<Auth>> a = Auth::Create(std::move(o), clock);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *std::move(a) : nullptr;
}

// Admit + Open, as the service does for a successful join.
std::string Join(Auth* auth, uint64_t id, const std::string& token) {
  absl::StatusOr<std::string> label = auth->Admit(token);
  EXPECT_TRUE(label.ok()) << label.status();
  return auth->Open(id, token);
}

bool IsLowerHex32(const std::string& s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// ParseTokenFile

TEST(ParseTokenFile, CommentsBlankLinesAndPairs) {
  const std::string text =
      "# join tokens\n"
      "\n"
      "   \n"
      "alice " + kTokA + "\n"
      "  # indented comment\n"
      "\tbob\t\t" + kTokB + "   \r\n"  // tabs, trailing blanks and CR are fine
      "carol    " + kTokC;            // no final newline
  absl::StatusOr<std::map<std::string, std::string>> t = ParseTokenFile(text);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ(t->at(kTokA), "alice");
  EXPECT_EQ(t->at(kTokB), "bob");
  EXPECT_EQ(t->at(kTokC), "carol");
}

TEST(ParseTokenFile, EmptyTextHasNoTokens) {
  absl::StatusOr<std::map<std::string, std::string>> t = ParseTokenFile("");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->empty());
  t = ParseTokenFile("# only a comment\n\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->empty());
}

TEST(ParseTokenFile, TokenLengthBoundary) {
  const std::string sixteen(16, 'x'), fifteen(15, 'x');
  absl::StatusOr<std::map<std::string, std::string>> ok = ParseTokenFile("w " + sixteen + "\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->at(sixteen), "w");
  absl::StatusOr<std::map<std::string, std::string>> bad = ParseTokenFile("alice " + kTokA + "\nw " + fifteen + "\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("line 2"), absl::string_view::npos) << bad.status();
}

TEST(ParseTokenFile, WrongFieldCounts) {
  for (const std::string& line : {"alice " + kTokA + " extra", "alice " + kTokA + " # comment", kTokA}) {
    absl::StatusOr<std::map<std::string, std::string>> t = ParseTokenFile("# c\n" + line + "\n");
    ASSERT_FALSE(t.ok()) << line;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << line;
    EXPECT_NE(t.status().message().find("line 2"), absl::string_view::npos) << t.status();
  }
}

TEST(ParseTokenFile, WeightsPerLabel) {
  std::map<std::string, float> w;
  absl::StatusOr<std::map<std::string, std::string>> t =
      ParseTokenFile("site " + kTokA + " weight=2.5\nsite " + kTokB + " weight=2.5\nvol " + kTokC + "\n", &w);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->at(kTokB), "site");
  EXPECT_FLOAT_EQ(w.at("site"), 2.5f);
  EXPECT_FLOAT_EQ(w.at("vol"), 1.0f);
  for (const std::string& bad : {"a " + kTokA + " weight=0", "a " + kTokA + " weight=-1", "a " + kTokA + " weight=x",
                                 "a " + kTokA + " weight=2\na " + kTokB + " weight=3"}) {
    EXPECT_EQ(ParseTokenFile(bad, &w).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ParseTokenFile, DuplicateTokenIsAnError) {
  absl::StatusOr<std::map<std::string, std::string>> t =
      ParseTokenFile("alice " + kTokA + "\nbob " + kTokB + "\nmallory " + kTokA + "\n");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("line 3"), absl::string_view::npos) << t.status();
  // The same label on two tokens is fine.
  t = ParseTokenFile("team " + kTokA + "\nteam " + kTokB + "\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 2u);
}

TEST(ParseTokenFile, LabelsAreSanitized) {
  const std::string long_label(100, 'L');
  absl::StatusOr<std::map<std::string, std::string>> t =
      ParseTokenFile("ev\"il{x=1}/\\ " + kTokA + "\n" + long_label + " " + kTokB + "\nok.name:1+2-3_ " + kTokC + "\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->at(kTokA), "ev_il_x_1___");
  EXPECT_EQ(t->at(kTokA), SafeName("ev\"il{x=1}/\\"));
  EXPECT_EQ(t->at(kTokB), std::string(64, 'L'));
  EXPECT_EQ(t->at(kTokC), "ok.name:1+2-3_");
}

// ---------------------------------------------------------------------------------------
// Create

TEST(AuthCreate, NeedsTokenFileOrOpenJoin) {
  FakeClock clock;
  absl::StatusOr<std::unique_ptr<Auth>> a = Auth::Create(AuthOptions{}, &clock);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);

  AuthOptions open;
  open.open_join = true;
  a = Auth::Create(open, &clock);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->Stats().tokens, 0u);
}

TEST(AuthCreate, MissingOrMalformedFile) {
  FakeClock clock;
  TokenDir dir;
  AuthOptions o;
  o.token_file = dir.path();  // not written yet
  absl::StatusOr<std::unique_ptr<Auth>> a = Auth::Create(o, &clock);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);

  // A missing file is an error even with open_join.
  o.open_join = true;
  a = Auth::Create(o, &clock);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);

  o.open_join = false;
  dir.Write("alice short\n");
  a = Auth::Create(o, &clock);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);

  dir.Write(TwoTokens());
  a = Auth::Create(o, &clock);
  ASSERT_TRUE(a.ok()) << a.status();
  AuthStats s = (*a)->Stats();
  EXPECT_EQ(s.tokens, 2u);
  EXPECT_EQ(s.token_reloads, 1u);
  EXPECT_EQ(s.token_reload_errors, 0u);
  EXPECT_EQ(s.sessions, 0u);
}

// ---------------------------------------------------------------------------------------
// Admit

// An Auth over TwoTokens() in a temp file, with the given options otherwise.
// Options with room for several sessions of one token (the default allows one).
AuthOptions ManySessions() {
  AuthOptions o;
  o.max_workers_per_token = 64;
  return o;
}

struct AuthFixture {
  explicit AuthFixture(AuthOptions o = AuthOptions{}) {
    dir.Write(TwoTokens());
    o.token_file = dir.path();
    auth = MustCreate(o, &clock);
  }
  FakeClock clock;
  TokenDir dir;
  std::unique_ptr<Auth> auth;
};

TEST(AuthAdmit, TokenChecks) {
  AuthOptions o;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Auth* auth = f.auth.get();

  absl::StatusOr<std::string> r = auth->Admit("");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated);
  r = auth->Admit("zzzzzzzzzzzzzzzzzzzz");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  r = auth->Admit(kTokA.substr(0, 19));  // a prefix of a real token is not that token
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  r = auth->Admit(kTokA);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "alice");
  r = auth->Admit(kTokB);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "bob");

  AuthStats s = auth->Stats();
  EXPECT_EQ(s.refused_no_token, 1u);
  EXPECT_EQ(s.refused_bad_token, 2u);
  EXPECT_EQ(s.refused_join_limit, 0u);
  EXPECT_EQ(s.sessions, 0u);  // admission alone opens no session
}

TEST(AuthAdmit, OpenJoin) {
  FakeClock clock;
  AuthOptions o;
  o.open_join = true;
  std::unique_ptr<Auth> auth = MustCreate(o, &clock);
  ASSERT_NE(auth, nullptr);
  absl::StatusOr<std::string> r = auth->Admit("");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "open");
  // A token that is given must still be a real one.
  r = auth->Admit(kTokA);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(auth->Stats().refused_bad_token, 1u);
  EXPECT_EQ(auth->Stats().refused_no_token, 0u);
}

TEST(AuthAdmit, OpenJoinWithTokenFile) {
  AuthOptions o;
  o.open_join = true;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Auth* auth = f.auth.get();
  absl::StatusOr<std::string> r = auth->Admit("");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "open");
  r = auth->Admit(kTokB);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "bob");
  r = auth->Admit("zzzzzzzzzzzzzzzzzzzz");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(AuthAdmit, JoinsPerTokenPerMinute) {
  AuthOptions o;
  o.max_workers_per_token = 64;  // several sessions of one token
  o.max_joins_per_token_per_minute = 3;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Auth* auth = f.auth.get();
  FakeClock& clock = f.clock;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(auth->Admit(kTokA).ok()) << i;
    clock.Advance(1);
  }
  // t = 1003; joins at 1000, 1001, 1002.
  EXPECT_EQ(auth->Admit(kTokA).status().code(), absl::StatusCode::kResourceExhausted);
  // Another token has its own budget.
  EXPECT_TRUE(auth->Admit(kTokB).ok());
  EXPECT_EQ(auth->Stats().refused_join_limit, 1u);
  clock.Advance(50);  // t = 1053: all three still inside the minute
  EXPECT_EQ(auth->Admit(kTokA).status().code(), absl::StatusCode::kResourceExhausted);
  clock.Advance(7.5);  // t = 1060.5: the join at 1000 is more than 60 s old
  EXPECT_TRUE(auth->Admit(kTokA).ok());
  EXPECT_EQ(auth->Admit(kTokA).status().code(), absl::StatusCode::kResourceExhausted);
  clock.Advance(2);  // t = 1062.5: the ones at 1001 and 1002 expired too
  EXPECT_TRUE(auth->Admit(kTokA).ok());
  EXPECT_TRUE(auth->Admit(kTokA).ok());
  EXPECT_EQ(auth->Admit(kTokA).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(auth->Stats().refused_join_limit, 4u);
}

TEST(AuthAdmit, JoinsPerMinuteInAll) {
  AuthOptions o;
  o.max_workers_per_token = 64;  // several sessions of one token
  o.max_joins_per_minute = 3;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Auth* auth = f.auth.get();
  FakeClock& clock = f.clock;
  EXPECT_TRUE(auth->Admit(kTokA).ok());
  EXPECT_TRUE(auth->Admit(kTokB).ok());
  EXPECT_TRUE(auth->Admit(kTokA).ok());
  EXPECT_EQ(auth->Admit(kTokB).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(auth->Admit(kTokA).status().code(), absl::StatusCode::kResourceExhausted);
  // Refused joins do not use up the budget, and bad tokens are refused as such first.
  EXPECT_EQ(auth->Admit("zzzzzzzzzzzzzzzzzzzz").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(auth->Admit("").status().code(), absl::StatusCode::kUnauthenticated);
  clock.Advance(60);  // exactly 60 s: still inside the window
  EXPECT_EQ(auth->Admit(kTokA).status().code(), absl::StatusCode::kResourceExhausted);
  clock.Advance(0.5);
  EXPECT_TRUE(auth->Admit(kTokB).ok());
  AuthStats s = auth->Stats();
  EXPECT_EQ(s.refused_join_limit, 3u);
  EXPECT_EQ(s.refused_bad_token, 1u);
  EXPECT_EQ(s.refused_no_token, 1u);
}

TEST(AuthAdmit, OpenJoinRateLimitsCountAsOneToken) {
  FakeClock clock;
  AuthOptions o;
  o.open_join = true;
  o.max_joins_per_token_per_minute = 2;
  std::unique_ptr<Auth> auth = MustCreate(o, &clock);
  ASSERT_NE(auth, nullptr);
  EXPECT_TRUE(auth->Admit("").ok());
  EXPECT_TRUE(auth->Admit("").ok());
  EXPECT_EQ(auth->Admit("").status().code(), absl::StatusCode::kResourceExhausted);
  clock.Advance(61);
  EXPECT_TRUE(auth->Admit("").ok());
}

TEST(AuthAdmit, MaxWorkersCountsOpenSessions) {
  AuthOptions o;
  o.max_workers_per_token = 64;  // several sessions of one token
  o.max_workers = 2;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Auth* auth = f.auth.get();
  // An admission holds its place until its session opens: concurrent joins cannot overshoot.
  ASSERT_TRUE(auth->Admit(kTokA).ok());
  ASSERT_TRUE(auth->Admit(kTokA).ok());
  EXPECT_EQ(auth->Admit(kTokB).status().code(), absl::StatusCode::kResourceExhausted);
  auth->Open(1, kTokA);
  auth->Open(2, kTokA);
  EXPECT_EQ(auth->Stats().sessions, 2u);
  EXPECT_EQ(auth->Admit(kTokA).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(auth->Admit(kTokC).status().code(), absl::StatusCode::kPermissionDenied);  // unknown first
  EXPECT_EQ(auth->Admit(kTokB).status().code(), absl::StatusCode::kResourceExhausted);
  auth->Close(1);
  EXPECT_EQ(auth->Stats().sessions, 1u);
  EXPECT_TRUE(auth->Admit(kTokB).ok());
  auth->Open(3, kTokB);
  EXPECT_EQ(auth->Admit(kTokA).status().code(), absl::StatusCode::kResourceExhausted);
  auth->Close(42);  // unknown id: no effect
  EXPECT_EQ(auth->Stats().sessions, 2u);
  EXPECT_EQ(auth->Stats().refused_join_limit, 4u);
}

TEST(AuthAdmit, MaxWorkersPerToken) {
  AuthOptions o;
  o.max_workers_per_token = 2;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Auth* auth = f.auth.get();
  Join(auth, 1, kTokA);
  Join(auth, 2, kTokA);
  EXPECT_EQ(auth->Admit(kTokA).status().code(), absl::StatusCode::kResourceExhausted);
  // Bob is not held back by alice's sessions.
  Join(auth, 3, kTokB);
  Join(auth, 4, kTokB);
  EXPECT_EQ(auth->Admit(kTokB).status().code(), absl::StatusCode::kResourceExhausted);
  auth->Close(2);
  EXPECT_TRUE(auth->Admit(kTokA).ok());
  EXPECT_EQ(auth->Admit(kTokB).status().code(), absl::StatusCode::kResourceExhausted);
  // Retain frees up slots the same way.
  auth->Retain([](uint64_t id) { return id != 4; });
  EXPECT_TRUE(auth->Admit(kTokB).ok());
  EXPECT_EQ(auth->Stats().refused_join_limit, 3u);
}

TEST(AuthAdmit, OpenJoinsAreBoundedByMaxWorkersOnly) {
  AuthOptions o;
  o.open_join = true;
  o.max_workers = 3;
  o.max_workers_per_token = 1;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Auth* auth = f.auth.get();
  Join(auth, 1, "");
  Join(auth, 2, "");  // the per-token bound does not apply to tokenless joins
  EXPECT_TRUE(auth->Admit(kTokA).ok());  // a token holder: its one session
  EXPECT_EQ(auth->Admit("").status().code(), absl::StatusCode::kResourceExhausted);  // 3 live in all
  auth->Close(1);
  EXPECT_TRUE(auth->Admit("").ok());
}

// ---------------------------------------------------------------------------------------
// Open / Check / revocation


TEST(AuthSession, KeysAreRandomHex) {
  AuthFixture f(ManySessions());
  ASSERT_NE(f.auth, nullptr);
  std::set<std::string> keys;
  for (uint64_t id = 1; id <= 50; ++id) {
    const std::string k = Join(f.auth.get(), id, id % 2 ? kTokA : kTokB);
    EXPECT_TRUE(IsLowerHex32(k)) << k;
    keys.insert(k);
  }
  EXPECT_EQ(keys.size(), 50u);
  // Reopening a session gives a new key; the old one stops working.
  bool revoked = true;
  const std::string k1 = f.auth->Open(7, kTokA);
  const std::string k2 = f.auth->Open(7, kTokA);
  EXPECT_NE(k1, k2);
  EXPECT_EQ(f.auth->Check(7, k1, &revoked).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(f.auth->Check(7, k2, &revoked).ok());
  EXPECT_EQ(f.auth->Stats().sessions, 50u);
}

TEST(AuthSession, CheckKeys) {
  AuthFixture f;
  ASSERT_NE(f.auth, nullptr);
  const std::string ka = Join(f.auth.get(), 11, kTokA);
  const std::string kb = Join(f.auth.get(), 22, kTokB);
  ASSERT_NE(ka, kb);
  bool revoked = true;
  EXPECT_TRUE(f.auth->Check(11, ka, &revoked).ok());
  EXPECT_FALSE(revoked);
  EXPECT_TRUE(f.auth->Check(22, kb, &revoked).ok());

  // Another worker's key, and keys off by one character (first, middle, last).
  revoked = true;
  EXPECT_EQ(f.auth->Check(11, kb, &revoked).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(revoked);
  for (size_t pos : {size_t{0}, size_t{15}, size_t{31}}) {
    std::string k = ka;
    k[pos] = k[pos] == '0' ? '1' : '0';
    EXPECT_EQ(f.auth->Check(11, k, &revoked).code(), absl::StatusCode::kPermissionDenied) << pos;
    EXPECT_FALSE(revoked);
  }
  // Prefix, extension and upper case are not the key either.
  EXPECT_EQ(f.auth->Check(11, ka.substr(0, 31), &revoked).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(f.auth->Check(11, ka + "0", &revoked).code(), absl::StatusCode::kPermissionDenied);
  std::string upper = ka;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper != ka) {
    EXPECT_EQ(f.auth->Check(11, upper, &revoked).code(), absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(f.auth->Check(11, "", &revoked).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(f.auth->Check(999, ka, &revoked).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(revoked);
  // Wrong keys close nothing.
  EXPECT_TRUE(f.auth->Check(11, ka, &revoked).ok());

  AuthStats s = f.auth->Stats();
  const uint64_t wrong = 1 + 3 + 2 + (upper != ka ? 1 : 0);
  EXPECT_EQ(s.refused_bad_session, wrong + 1);  // + the empty key
  EXPECT_EQ(s.refused_revoked, 0u);
  EXPECT_EQ(s.sessions, 2u);

  f.auth->Close(11);
  EXPECT_EQ(f.auth->Check(11, ka, &revoked).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(f.auth->Check(22, kb, &revoked).ok());
  EXPECT_EQ(f.auth->Stats().sessions, 1u);
}

TEST(AuthSession, RevocationOnReload) {
  AuthFixture f(ManySessions());
  ASSERT_NE(f.auth, nullptr);
  const std::string ka = Join(f.auth.get(), 1, kTokA);
  const std::string ka2 = Join(f.auth.get(), 2, kTokA);
  const std::string kb = Join(f.auth.get(), 3, kTokB);
  EXPECT_EQ(f.auth->Stats().tokens, 2u);
  EXPECT_EQ(f.auth->Stats().token_reloads, 1u);

  // Drop alice, add carol.
  f.dir.Write("bob " + kTokB + "\ncarol " + kTokC + "\n");
  ASSERT_TRUE(f.auth->Reload(true).ok());
  AuthStats s = f.auth->Stats();
  EXPECT_EQ(s.tokens, 2u);
  EXPECT_EQ(s.token_reloads, 2u);
  EXPECT_EQ(s.sessions, 3u);  // revocation takes effect at the next call

  bool revoked = false;
  absl::Status st = f.auth->Check(1, ka, &revoked);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(revoked);
  EXPECT_EQ(f.auth->Stats().sessions, 2u);
  revoked = true;
  EXPECT_EQ(f.auth->Check(1, ka, &revoked).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(revoked);
  // A wrong key for a revoked session is refused as a wrong key, and leaves it open.
  EXPECT_EQ(f.auth->Check(2, kb, &revoked).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(revoked);
  EXPECT_EQ(f.auth->Check(2, ka2, &revoked).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(revoked);
  EXPECT_EQ(f.auth->Check(2, ka2, &revoked).code(), absl::StatusCode::kNotFound);
  // Bob is unaffected; alice can no longer join, carol can.
  EXPECT_TRUE(f.auth->Check(3, kb, &revoked).ok());
  EXPECT_FALSE(revoked);
  EXPECT_EQ(f.auth->Admit(kTokA).status().code(), absl::StatusCode::kPermissionDenied);
  absl::StatusOr<std::string> carol = f.auth->Admit(kTokC);
  ASSERT_TRUE(carol.ok()) << carol.status();
  EXPECT_EQ(*carol, "carol");

  s = f.auth->Stats();
  EXPECT_EQ(s.refused_revoked, 2u);
  EXPECT_EQ(s.refused_bad_session, 1u);
  EXPECT_EQ(s.refused_bad_token, 1u);
  EXPECT_EQ(s.sessions, 1u);
}

TEST(AuthSession, OpenJoinSessionsAreNeverRevoked) {
  AuthOptions o;
  o.open_join = true;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Auth* auth = f.auth.get();
  TokenDir& dir = f.dir;
  const std::string k = Join(auth, 5, "");
  dir.Write("# nobody\n");
  ASSERT_TRUE(auth->Reload(true).ok());
  EXPECT_EQ(auth->Stats().tokens, 0u);
  bool revoked = true;
  EXPECT_TRUE(auth->Check(5, k, &revoked).ok());
  EXPECT_FALSE(revoked);
}

TEST(AuthSession, MalformedReloadKeepsPreviousTokens) {
  AuthFixture f(ManySessions());
  ASSERT_NE(f.auth, nullptr);
  const std::string ka = Join(f.auth.get(), 1, kTokA);
  // A broken file that would also drop alice: nothing changes.
  f.dir.Write("bob " + kTokB + "\nthis line is broken\n");
  absl::Status st = f.auth->Reload(true);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  AuthStats s = f.auth->Stats();
  EXPECT_EQ(s.tokens, 2u);
  EXPECT_EQ(s.token_reloads, 1u);
  EXPECT_EQ(s.token_reload_errors, 1u);
  bool revoked = true;
  EXPECT_TRUE(f.auth->Check(1, ka, &revoked).ok());
  EXPECT_FALSE(revoked);
  EXPECT_TRUE(f.auth->Admit(kTokA).ok());

  // A file that disappears is an error too, and also keeps the tokens.
  std::remove(f.dir.path().c_str());
  EXPECT_EQ(f.auth->Reload(true).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.auth->Reload(false).code(), absl::StatusCode::kInvalidArgument);
  s = f.auth->Stats();
  EXPECT_EQ(s.tokens, 2u);
  EXPECT_EQ(s.token_reload_errors, 3u);
  EXPECT_TRUE(f.auth->Check(1, ka, &revoked).ok());

  // A good file again is taken.
  f.dir.Write("bob " + kTokB + "\n");
  ASSERT_TRUE(f.auth->Reload(true).ok());
  s = f.auth->Stats();
  EXPECT_EQ(s.tokens, 1u);
  EXPECT_EQ(s.token_reloads, 2u);
  EXPECT_EQ(s.token_reload_errors, 3u);
  EXPECT_EQ(f.auth->Check(1, ka, &revoked).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(revoked);
}

TEST(AuthSession, UnforcedReloadOnlyWhenFileChanged) {
  AuthFixture f;
  ASSERT_NE(f.auth, nullptr);
  ASSERT_TRUE(f.auth->Reload(false).ok());
  EXPECT_EQ(f.auth->Stats().token_reloads, 1u);  // unchanged: not re-read
  ASSERT_TRUE(f.auth->Reload(true).ok());
  EXPECT_EQ(f.auth->Stats().token_reloads, 2u);
  // A different size is noticed without force.
  f.dir.Write(TwoTokens() + "carol " + kTokC + "\n");
  ASSERT_TRUE(f.auth->Reload(false).ok());
  AuthStats s = f.auth->Stats();
  EXPECT_EQ(s.token_reloads, 3u);
  EXPECT_EQ(s.tokens, 3u);
  EXPECT_EQ(s.token_reload_errors, 0u);
}

// ---------------------------------------------------------------------------------------
// BeginStream

TEST(AuthStream, SlotsPerWorker) {
  AuthOptions o;
  o.max_workers_per_token = 64;  // several sessions of one token
  o.max_streams_per_worker = 2;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Join(f.auth.get(), 1, kTokA);
  Join(f.auth.get(), 2, kTokA);
  {
    absl::StatusOr<Auth::Stream> s1 = f.auth->BeginStream(1);
    ASSERT_TRUE(s1.ok()) << s1.status();
    {
      absl::StatusOr<Auth::Stream> s2 = f.auth->BeginStream(1);
      ASSERT_TRUE(s2.ok()) << s2.status();
      absl::StatusOr<Auth::Stream> s3 = f.auth->BeginStream(1);
      EXPECT_EQ(s3.status().code(), absl::StatusCode::kResourceExhausted);
      // Slots are per worker.
      absl::StatusOr<Auth::Stream> other = f.auth->BeginStream(2);
      EXPECT_TRUE(other.ok()) << other.status();
    }
    // s2 gone: one slot free again, and only one.
    absl::StatusOr<Auth::Stream> s2b = f.auth->BeginStream(1);
    ASSERT_TRUE(s2b.ok()) << s2b.status();
    EXPECT_EQ(f.auth->BeginStream(1).status().code(), absl::StatusCode::kResourceExhausted);
  }
  // All released: both slots free.
  absl::StatusOr<Auth::Stream> a = f.auth->BeginStream(1);
  absl::StatusOr<Auth::Stream> b = f.auth->BeginStream(1);
  EXPECT_TRUE(a.ok());
  EXPECT_TRUE(b.ok());
  EXPECT_EQ(f.auth->BeginStream(1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(f.auth->BeginStream(77).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.auth->Stats().refused_stream_limit, 3u);
}

TEST(AuthStream, MovedStreamsReleaseOnce) {
  AuthOptions o;
  o.max_streams_per_worker = 2;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Join(f.auth.get(), 1, kTokA);
  absl::StatusOr<Auth::Stream> keep = f.auth->BeginStream(1);
  ASSERT_TRUE(keep.ok());
  std::optional<absl::StatusOr<Auth::Stream>> moved;
  {
    absl::StatusOr<Auth::Stream> s = f.auth->BeginStream(1);
    ASSERT_TRUE(s.ok());
    absl::StatusOr<Auth::Stream> hop(std::move(s));  // StatusOr moved
    std::vector<Auth::Stream> v;
    v.push_back(std::move(*hop));                     // Stream moved out of it
    v.reserve(16);                                    // and relocated inside the vector
    moved.emplace(std::move(v.back()));               // and moved again
    // s, hop and v (all moved-from) die here: none may free the slot.
  }
  EXPECT_EQ(f.auth->BeginStream(1).status().code(), absl::StatusCode::kResourceExhausted);
  moved.reset();  // the one live holder releases it
  absl::StatusOr<Auth::Stream> again = f.auth->BeginStream(1);
  EXPECT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(f.auth->BeginStream(1).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(AuthStream, StreamOutlivingItsSessionIsHarmless) {
  AuthOptions o;
  o.max_streams_per_worker = 1;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Join(f.auth.get(), 1, kTokA);
  std::optional<absl::StatusOr<Auth::Stream>> s;
  s.emplace(f.auth->BeginStream(1));
  ASSERT_TRUE(s->ok());
  f.auth->Close(1);
  EXPECT_EQ(f.auth->BeginStream(1).status().code(), absl::StatusCode::kNotFound);
  s.reset();  // its session is gone: nothing to release, no crash
  EXPECT_EQ(f.auth->Stats().sessions, 0u);
}

// ---------------------------------------------------------------------------------------
// CountPush

TEST(AuthPush, AttemptsPerRound) {
  AuthOptions o;
  o.max_push_attempts_per_round = 3;
  AuthFixture f(o);
  ASSERT_NE(f.auth, nullptr);
  Join(f.auth.get(), 1, kTokA);
  Join(f.auth.get(), 2, kTokB);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.auth->CountPush(1, 0).ok()) << i;
  EXPECT_EQ(f.auth->CountPush(1, 0).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(f.auth->CountPush(1, 0).code(), absl::StatusCode::kResourceExhausted);
  // Another worker has its own count.
  EXPECT_TRUE(f.auth->CountPush(2, 0).ok());
  // A new round starts afresh.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.auth->CountPush(1, 1).ok()) << i;
  EXPECT_EQ(f.auth->CountPush(1, 1).code(), absl::StatusCode::kResourceExhausted);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.auth->CountPush(1, 5).ok()) << i;
  EXPECT_EQ(f.auth->CountPush(1, 5).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(f.auth->CountPush(99, 5).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.auth->Stats().refused_push_limit, 4u);
}

// ---------------------------------------------------------------------------------------
// Retain

TEST(AuthRetain, KeepsOnlyLiveIds) {
  AuthFixture f(ManySessions());
  ASSERT_NE(f.auth, nullptr);
  std::map<uint64_t, std::string> keys;
  for (uint64_t id = 1; id <= 6; ++id) keys[id] = Join(f.auth.get(), id, kTokA);
  std::vector<uint64_t> asked;
  f.auth->Retain([&](uint64_t id) {
    asked.push_back(id);
    return id % 2 == 0;
  });
  EXPECT_EQ(asked, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(f.auth->Stats().sessions, 3u);
  bool revoked = false;
  for (uint64_t id = 1; id <= 6; ++id) {
    absl::Status s = f.auth->Check(id, keys[id], &revoked);
    if (id % 2 == 0) {
      EXPECT_TRUE(s.ok()) << id << ": " << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << id;
    }
  }
  f.auth->Retain([](uint64_t) { return true; });
  EXPECT_EQ(f.auth->Stats().sessions, 3u);
  f.auth->Retain([](uint64_t) { return false; });
  EXPECT_EQ(f.auth->Stats().sessions, 0u);
}

}  // namespace
}  // namespace muloco
