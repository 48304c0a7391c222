// nlohmann: a driver for nlohmann/json (Debian's nlohmann-json3-dev, a
// header-only, template-heavy C++ library kprofd's authors did not
// write), for kprofd's benchmarks of counts in the default mode.
//
// Build:
//   g++ -O2 -g -o nlohmann nlohmann.cc
//
// Protocol on stdin/stdout: it prints "ready", then for each line
//   run N   makes N calls of handle(); prints "done HASH", HASH the
//           last call's result (the same for every call)
//   exit    exits with status 3
// and at end of input exits with status 4.
//
// Every call of handle() does the same work: at start the program
// generates a fixed set of JSON texts from an LCG with a fixed seed
// (documents of varied shape: a service configuration, an array of
// records, a deep tree, a table of numbers, a document of strings with
// escapes and non-ASCII text), and handle() parses each one, walks it,
// modifies a copy, diffs the two (json::diff) and applies the patch,
// flattens and unflattens it, round-trips it through MessagePack and
// CBOR, dumps it compact and indented, and parses a broken text whose
// parse_error it catches. Nothing carries over from one call to the
// next but the hash, so a call's calls below handle() are the same in
// every call: the truth a benchmark scales.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

using nlohmann::json;

#define NOINLINE __attribute__((noinline))

namespace {

// Lcg is the generator the documents come from (Knuth's MMIX constants).
struct Lcg {
	uint64_t s;
	uint64_t next()
	{
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		return s >> 33;
	}
	int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
};

const char *const words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
			     "iota", "kappa", "lambda", "mu", "nu", "xi", "omicron", "pi"};

std::string word(Lcg &r) { return words[r.below(16)]; }

// text returns a string with escapes and non-ASCII characters now and then.
std::string text(Lcg &r)
{
	std::string s = word(r);
	switch (r.below(6)) {
	case 0: s += " \"quoted\"\tand\\slashed"; break;
	case 1: s += " gr\xc3\xbc\xc3\x9f" "e \xe2\x82\xac"; break;
	case 2: s += "\n" + word(r); break;
	default: s += "-" + word(r); break;
	}
	return s;
}

json config(Lcg &r)
{
	json c = {{"name", "service-" + word(r)}, {"version", {1, r.below(10), r.below(100)}}, {"enabled", true}};
	for (int i = 0; i < 12; i++) {
		json e = {{"host", word(r) + ".example.org"}, {"port", 1024 + r.below(50000)},
			  {"weight", r.below(1000) / 10.0}, {"tags", json::array()}};
		for (int k = r.below(4); k > 0; k--)
			e["tags"].push_back(word(r));
		c["backends"].push_back(e);
	}
	for (int i = 0; i < 20; i++)
		c["limits"][word(r) + std::to_string(i)] = r.below(1 << 20);
	return c;
}

json records(Lcg &r)
{
	json a = json::array();
	for (int i = 0; i < 40; i++)
		a.push_back({{"id", i}, {"user", text(r)}, {"score", r.below(100000) / 100.0}, {"active", r.below(2) == 1},
			     {"parent", r.below(3) == 0 ? json(nullptr) : json(r.below(i + 1))}});
	return a;
}

json tree(Lcg &r, int depth)
{
	if (depth == 0 || r.below(5) == 0)
		return r.below(2) ? json(word(r)) : json(r.below(1000));
	json t = json::object();
	for (int i = 1 + r.below(3); i > 0; i--)
		t[word(r)] = tree(r, depth - 1);
	if (r.below(2))
		t["list"] = {tree(r, depth - 1), tree(r, depth - 2 < 0 ? 0 : depth - 2)};
	return t;
}

json table(Lcg &r)
{
	json t = json::array();
	for (int i = 0; i < 30; i++) {
		json row = json::array();
		for (int k = 0; k < 8; k++)
			row.push_back(r.below(3) ? json(static_cast<int64_t>(r.next()) - (1ll << 30)) : json(r.below(1 << 30) / 1e4));
		t.push_back(row);
	}
	return t;
}

json strings(Lcg &r)
{
	json s = json::object();
	for (int i = 0; i < 30; i++)
		s[word(r) + "_" + std::to_string(i)] = text(r);
	return s;
}

// docs are the texts every call of handle parses.
std::vector<std::string> docs;

// broken is a text that does not parse.
const char *const broken = R"({"a": [1, 2, {"b": tru}], "c": 3})";

void generate()
{
	Lcg r{20240611};
	docs.push_back(config(r).dump());
	docs.push_back(records(r).dump());
	docs.push_back(tree(r, 7).dump());
	docs.push_back(table(r).dump());
	docs.push_back(strings(r).dump(1));
	docs.push_back(config(r).dump(4));
}

uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	return h;
}

uint64_t hash(const std::string &s) { return std::hash<std::string>{}(s); }

// walk folds every value below j into a hash, by kind.
uint64_t walk(const json &j, uint64_t h)
{
	switch (j.type()) {
	case json::value_t::object:
		for (const auto &[k, v] : j.items())
			h = walk(v, mix(h, hash(k)));
		return h;
	case json::value_t::array:
		for (const auto &v : j)
			h = walk(v, h);
		return mix(h, j.size());
	case json::value_t::string:
		return mix(h, hash(j.get<std::string>()));
	case json::value_t::number_float:
		return mix(h, static_cast<uint64_t>(j.get<double>() * 1000));
	case json::value_t::number_integer:
	case json::value_t::number_unsigned:
		return mix(h, static_cast<uint64_t>(j.get<int64_t>()));
	case json::value_t::boolean:
		return mix(h, j.get<bool>());
	default:
		return mix(h, 7);
	}
}

// modify changes a copy of j: a field added and one removed in each
// object, arrays grown and numbers scaled, down to depth 3.
void modify(json &j, int depth)
{
	if (depth == 0)
		return;
	if (j.is_object()) {
		j["touched"] = depth;
		if (j.size() > 3)
			j.erase(j.begin());
		for (auto &[k, v] : j.items())
			modify(v, depth - 1);
	} else if (j.is_array()) {
		if (!j.empty() && j.size() % 2 == 0)
			j.push_back(j.front());
		for (auto &v : j)
			modify(v, depth - 1);
	} else if (j.is_number_integer()) {
		j = j.get<int64_t>() * 3 + 1;
	}
}

// process does one document's work and returns its hash; 1 or 3 when
// a round trip did not give back what went in.
uint64_t process(const std::string &s)
{
	json j = json::parse(s);
	uint64_t h = walk(j, 0);
	json changed = j;
	modify(changed, 3);
	json patch = json::diff(j, changed);
	if (j.patch(patch) != changed)
		return 1;
	// Flattening maps empty arrays to null: the round trip is not exact.
	json flat = j.flatten();
	h = mix(h, flat.size() + flat.unflatten().size());
	std::vector<uint8_t> packed = json::to_msgpack(changed);
	std::vector<uint8_t> cbor = json::to_cbor(j);
	if (json::from_msgpack(packed) != changed || json::from_cbor(cbor) != j)
		return 3;
	h = mix(h, hash(changed.dump()));
	h = mix(h, hash(j.dump(2)));
	h = mix(h, patch.size());
	return mix(h, packed.size() + cbor.size());
}

} // namespace

// handle is the root: every call does the same work (see the top).
NOINLINE uint64_t handle()
{
	uint64_t h = 0;
	for (const std::string &d : docs)
		h = mix(h, process(d));
	try {
		json j = json::parse(broken);
		h = mix(h, j.size());
	} catch (const json::parse_error &e) {
		h = mix(h, e.id);
	}
	return h;
}

int main()
{
	generate();
	for (const std::string &d : docs) {
		if (uint64_t h = process(d); h <= 3) {
			fprintf(stderr, "nlohmann: round trip %llu failed on %.40s\n", static_cast<unsigned long long>(h), d.c_str());
			return 1;
		}
	}
	printf("ready\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		int n;
		if (sscanf(line, "run %d", &n) == 1) {
			uint64_t h = 0;
			for (int i = 0; i < n; i++)
				h = handle();
			printf("done %llu\n", static_cast<unsigned long long>(h));
			fflush(stdout);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 3;
		}
	}
	return 4;
}
