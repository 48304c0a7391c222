// jsonparse: a template-heavy C++17 target: a JSON generator, a
// recursive-descent parser, printers, a MessagePack codec and analyses
// built on the standard library (std::variant, std::vector, std::map,
// std::string, std::function, std::unordered_map, std::sort). Below its
// root there are hundreds of functions, the program's own templates and
// member functions and the standard library's instantiations, some of
// them (the parser's character helpers) called millions of times per
// run, and every tenth call throws ParseError out of the parser's
// recursion. kprofd's tests and benchmarks use it as a realistic C++
// program whose call tree is wide, deep and hot.
//
// Build:
//   g++ -O2 -g -o jsonparse jsonparse.cc
//
// Protocol on stdin/stdout: it prints "ready", then for each line
//   run N   makes N calls handle_request(i), i in [0, N); prints
//           "done SUM ERRORS WS", SUM the sum of their results modulo
//           2^64, ERRORS the ParseErrors caught: one for every i with
//           i % 10 == 9, so N/10 rounded down, and WS the calls of
//           json::is_ws they made
//   exit    exits with status 3
// and at end of input exits with status 4. The output depends only on
// the input lines: every document comes from an LCG seeded by its index.
//
// Per call handle_request(i):
//   - a Generator seeded from i builds a document of some 350 values (an
//     object of nested objects and arrays of strings with escapes and
//     non-ASCII characters, numbers, booleans and nulls), and a
//     Printer<Compact> serializes it into 1 to 8 kB of text (non-ASCII
//     as \uXXXX escapes);
//   - when i % 10 == 9, corrupt() breaks the text (deletes a ':',
//     replaces a structural character with '@', breaks an escape or
//     truncates it, so that parsing always fails);
//   - parse() copies the text into one of five kinds of input, by
//     (i + i / 10) % 5, and a Parser over its iterators parses it (a
//     ParseError is caught in handle_request, which returns the FNV-1a
//     hash of its message xor'ed with a tag);
//   - the value is encoded in MessagePack and decoded back, and both it
//     and the decoded value are compared with the generated one;
//   - print_checked prints it in one of three indented styles, by i % 3,
//     and checks that the text minified equals the value printed on one
//     line;
//   - the six analyses (statistics, sums, depths, key frequencies with
//     std::partial_sort, longest strings with std::sort, path lookups)
//     are called through std::function;
// and the result mixes the hashes of the indented text, of the analyses
// and of the MessagePack bytes.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#define NOINLINE __attribute__((noinline))

namespace json {

class Value;
using Array = std::vector<Value>;
using Object = std::map<std::string, Value>;

enum class Kind { Null, Bool, Number, String, Array, Object };

// Value is one JSON value: a std::variant of the six kinds. Arrays and
// objects hold their elements by value.
class Value {
public:
	using Storage = std::variant<std::nullptr_t, bool, double, std::string, Array, Object>;

	Value() noexcept : v_(nullptr) {}
	explicit Value(bool b) : v_(b) {}
	explicit Value(double d) : v_(d) {}
	explicit Value(std::string s) : v_(std::move(s)) {}
	explicit Value(Array a) : v_(std::move(a)) {}
	explicit Value(Object o) : v_(std::move(o)) {}

	template <class T>
	bool is() const noexcept { return std::holds_alternative<T>(v_); }
	template <class T>
	const T &as() const { return std::get<T>(v_); }
	template <class T>
	T &as() { return std::get<T>(v_); }

	template <class F>
	decltype(auto) visit(F &&f) const { return std::visit(std::forward<F>(f), v_); }

	const Storage &storage() const noexcept { return v_; }
	NOINLINE Kind kind() const noexcept { return static_cast<Kind>(v_.index()); }
	NOINLINE size_t size() const noexcept;

private:
	Storage v_;
};

size_t Value::size() const noexcept
{
	if (is<Array>())
		return as<Array>().size();
	if (is<Object>())
		return as<Object>().size();
	return 0;
}

// Equal compares two values' storage alternative by alternative; arrays
// and objects compare their elements with operator==, recursively.
struct Equal {
	template <class A, class B>
	bool operator()(const A &, const B &) const { return false; }
	template <class A>
	bool operator()(const A &a, const A &b) const { return a == b; }
};

NOINLINE bool operator==(const Value &a, const Value &b)
{
	return std::visit(Equal{}, a.storage(), b.storage());
}

// ParseError is what Parser throws on malformed input.
class ParseError : public std::runtime_error {
public:
	ParseError(const std::string &msg, size_t offset)
	    : std::runtime_error(msg + " at offset " + std::to_string(offset)), offset_(offset) {}
	size_t offset() const noexcept { return offset_; }

private:
	size_t offset_;
};

// Character-level helpers, kept out of line so each use is a real call.
// is_ws counts its calls, which "run N" reports: the truth kprofd's
// estimates of a hot function's calls are checked against.
unsigned long is_ws_calls;
NOINLINE bool is_digit(char c) { return c >= '0' && c <= '9'; }
NOINLINE bool is_ws(char c)
{
	is_ws_calls++;
	return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}
NOINLINE int digit_value(char c) { return c - '0'; }

NOINLINE int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

NOINLINE char hex_digit(unsigned v) { return "0123456789abcdef"[v & 15]; }

// append_utf8 appends code point cp to out in UTF-8.
NOINLINE void append_utf8(std::string &out, uint32_t cp)
{
	if (cp < 0x80) {
		out.push_back(static_cast<char>(cp));
	} else if (cp < 0x800) {
		out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
		out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
	} else if (cp < 0x10000) {
		out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
		out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
		out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
	} else {
		out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
		out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
		out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
		out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
	}
}

// decode_utf8 returns the code point starting at s[i] (valid UTF-8, as
// this program only makes) and advances i past it.
NOINLINE uint32_t decode_utf8(const std::string &s, size_t &i)
{
	unsigned char c = s[i++];
	if (c < 0x80)
		return c;
	int more = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
	uint32_t cp = c & (0x3f >> more);
	while (more-- > 0 && i < s.size())
		cp = cp << 6 | (static_cast<unsigned char>(s[i++]) & 0x3f);
	return cp;
}

// scale10 returns m * 10^e, dividing for negative e so that short
// decimals come out correctly rounded.
NOINLINE double scale10(double m, int e)
{
	static const double pow10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
				       1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
	for (; e > 22; e -= 22)
		m *= 1e22;
	for (; e < -22; e += 22)
		m /= 1e22;
	return e >= 0 ? m * pow10[e] : m / pow10[-e];
}

// Parser is a recursive-descent JSON parser over the characters in
// [begin, end).
template <class It>
class Parser {
public:
	Parser(It begin, It end) : begin_(begin), cur_(begin), end_(end) {}

	// parse_document parses one value filling the whole input.
	Value parse_document()
	{
		skip_ws();
		Value v = parse_value(0);
		skip_ws();
		if (!at_end())
			fail("trailing characters");
		return v;
	}

private:
	static constexpr int max_depth = 64;

	NOINLINE bool at_end() const { return cur_ == end_; }
	NOINLINE char peek() const { return cur_ == end_ ? '\0' : *cur_; }
	NOINLINE size_t offset() const { return static_cast<size_t>(std::distance(begin_, cur_)); }

	NOINLINE char next()
	{
		if (at_end())
			fail("unexpected end of input");
		return *cur_++;
	}

	NOINLINE void skip_ws()
	{
		while (!at_end() && is_ws(peek()))
			++cur_;
	}

	NOINLINE bool consume(char c)
	{
		if (peek() != c)
			return false;
		++cur_;
		return true;
	}

	NOINLINE void expect(char c)
	{
		if (!consume(c))
			fail(std::string("expected '") + c + "'");
	}

	[[noreturn]] NOINLINE void fail(const std::string &msg) const { throw ParseError(msg, offset()); }

	Value parse_value(int depth)
	{
		if (depth > max_depth)
			fail("nesting too deep");
		char c = peek();
		switch (c) {
		case '{':
			return parse_object(depth + 1);
		case '[':
			return parse_array(depth + 1);
		case '"':
			return Value(parse_string());
		case 't':
		case 'f':
		case 'n':
			return parse_literal();
		default:
			if (c == '-' || is_digit(c))
				return parse_number();
			fail(c ? std::string("unexpected character '") + c + "'" : "unexpected end of input");
		}
	}

	NOINLINE Value parse_object(int depth)
	{
		expect('{');
		Object obj;
		skip_ws();
		if (consume('}'))
			return Value(std::move(obj));
		for (;;) {
			skip_ws();
			if (peek() != '"')
				fail("expected a key");
			std::string key = parse_string();
			skip_ws();
			expect(':');
			skip_ws();
			obj[std::move(key)] = parse_value(depth);
			skip_ws();
			if (consume('}'))
				return Value(std::move(obj));
			expect(',');
		}
	}

	NOINLINE Value parse_array(int depth)
	{
		expect('[');
		Array arr;
		skip_ws();
		if (consume(']'))
			return Value(std::move(arr));
		for (;;) {
			skip_ws();
			arr.push_back(parse_value(depth));
			skip_ws();
			if (consume(']'))
				return Value(std::move(arr));
			expect(',');
		}
	}

	NOINLINE std::string parse_string()
	{
		expect('"');
		std::string out;
		for (;;) {
			char c = next();
			if (c == '"')
				return out;
			if (c == '\\')
				parse_escape(out);
			else if (static_cast<unsigned char>(c) < 0x20)
				fail("control character in string");
			else
				out.push_back(c);
		}
	}

	NOINLINE uint32_t parse_hex4()
	{
		uint32_t v = 0;
		for (int k = 0; k < 4; k++) {
			int h = hex_value(next());
			if (h < 0)
				fail("bad \\u escape");
			v = v << 4 | static_cast<uint32_t>(h);
		}
		return v;
	}

	NOINLINE void parse_escape(std::string &out)
	{
		char c = next();
		switch (c) {
		case '"':
		case '\\':
		case '/':
			out.push_back(c);
			return;
		case 'b': out.push_back('\b'); return;
		case 'f': out.push_back('\f'); return;
		case 'n': out.push_back('\n'); return;
		case 'r': out.push_back('\r'); return;
		case 't': out.push_back('\t'); return;
		case 'u': break;
		default: fail(std::string("bad escape '\\") + c + "'");
		}
		uint32_t cp = parse_hex4();
		if (cp >= 0xdc00 && cp < 0xe000)
			fail("lone low surrogate");
		if (cp >= 0xd800 && cp < 0xdc00) {
			expect('\\');
			expect('u');
			uint32_t lo = parse_hex4();
			if (lo < 0xdc00 || lo >= 0xe000)
				fail("bad low surrogate");
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
		}
		append_utf8(out, cp);
	}

	// digits accumulates decimal digits into the mantissa (at most 19
	// significant ones; the rest only move the exponent).
	NOINLINE void digits(uint64_t &mant, int &count, int &exp10, bool fraction)
	{
		while (is_digit(peek())) {
			int d = digit_value(next());
			if (count < 19) {
				mant = mant * 10 + static_cast<uint64_t>(d);
				if (mant)
					count++;
				if (fraction)
					exp10--;
			} else if (!fraction) {
				exp10++;
			}
		}
	}

	NOINLINE Value parse_number()
	{
		bool neg = consume('-');
		if (!is_digit(peek()))
			fail("expected a digit");
		uint64_t mant = 0;
		int count = 0, exp10 = 0;
		if (!consume('0'))
			digits(mant, count, exp10, false);
		if (consume('.')) {
			if (!is_digit(peek()))
				fail("expected a digit after '.'");
			digits(mant, count, exp10, true);
		}
		if (peek() == 'e' || peek() == 'E') {
			next();
			bool eneg = false;
			if (peek() == '+' || peek() == '-')
				eneg = next() == '-';
			if (!is_digit(peek()))
				fail("expected an exponent");
			int e = 0;
			while (is_digit(peek()))
				e = std::min(e * 10 + digit_value(next()), 9999);
			exp10 += eneg ? -e : e;
		}
		double d = scale10(static_cast<double>(mant), exp10);
		return Value(neg ? -d : d);
	}

	NOINLINE void literal(const char *word)
	{
		for (const char *p = word; *p; p++)
			if (next() != *p)
				fail(std::string("bad literal, expected ") + word);
	}

	NOINLINE Value parse_literal()
	{
		switch (peek()) {
		case 't': literal("true"); return Value(true);
		case 'f': literal("false"); return Value(false);
		default: literal("null"); return Value();
		}
	}

	It begin_, cur_, end_;
};

// Style is a Printer's output format: Indent spaces per level (0: all
// on one line), non-ASCII characters as \uXXXX escapes if Ascii, else as
// UTF-8.
template <int Indent, bool Ascii>
struct Style {
	static constexpr bool pretty = Indent > 0;
	static constexpr bool ascii = Ascii;
	static constexpr int indent = Indent;
};

using Compact = Style<0, true>;

// Printer serializes values into a string in style S, walking them with
// a visitor.
template <class S>
class Printer {
public:
	explicit Printer(std::string &out) : out_(out) {}

	void print(const Value &v)
	{
		write(v, 0);
		if constexpr (S::pretty)
			put('\n');
	}

private:
	struct Visitor {
		Printer &p;
		int depth;
		void operator()(std::nullptr_t) const { p.put_literal("null"); }
		void operator()(bool b) const { p.put_literal(b ? "true" : "false"); }
		void operator()(double d) const { p.put_number(d); }
		void operator()(const std::string &s) const { p.put_string(s); }
		void operator()(const Array &a) const { p.put_array(a, depth); }
		void operator()(const Object &o) const { p.put_object(o, depth); }
	};

	NOINLINE void write(const Value &v, int depth) { v.visit(Visitor{*this, depth}); }
	NOINLINE void put(char c) { out_.push_back(c); }
	NOINLINE void put_literal(const char *s) { out_.append(s); }

	NOINLINE void newline(int depth)
	{
		if constexpr (S::pretty) {
			put('\n');
			out_.append(static_cast<size_t>(depth * S::indent), ' ');
		}
	}

	NOINLINE void put_number(double d)
	{
		char buf[32];
		if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15)
			put_integer(static_cast<long long>(d));
		else if (std::isfinite(d))
			out_.append(buf, static_cast<size_t>(snprintf(buf, sizeof buf, "%.12g", d)));
		else
			put_literal("null");
	}

	NOINLINE void put_integer(long long v)
	{
		char buf[24];
		char *p = buf + sizeof buf;
		unsigned long long u = v < 0 ? 0ull - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
		do {
			*--p = static_cast<char>('0' + u % 10);
			u /= 10;
		} while (u);
		if (v < 0)
			*--p = '-';
		out_.append(p, static_cast<size_t>(buf + sizeof buf - p));
	}

	NOINLINE void put_u_escape(uint32_t unit)
	{
		put('\\');
		put('u');
		for (int shift = 12; shift >= 0; shift -= 4)
			put(hex_digit(unit >> shift));
	}

	NOINLINE void put_code_point(uint32_t cp)
	{
		switch (cp) {
		case '"': put('\\'); put('"'); return;
		case '\\': put('\\'); put('\\'); return;
		case '\n': put('\\'); put('n'); return;
		case '\t': put('\\'); put('t'); return;
		case '\r': put('\\'); put('r'); return;
		}
		if (cp < 0x20) {
			put_u_escape(cp);
		} else if (cp < 0x80) {
			put(static_cast<char>(cp));
		} else if (!S::ascii) {
			append_utf8(out_, cp);
		} else if (cp < 0x10000) {
			put_u_escape(cp);
		} else {
			put_u_escape(0xd800 + ((cp - 0x10000) >> 10));
			put_u_escape(0xdc00 + ((cp - 0x10000) & 0x3ff));
		}
	}

	NOINLINE void put_string(const std::string &s)
	{
		put('"');
		for (size_t i = 0; i < s.size();)
			put_code_point(decode_utf8(s, i));
		put('"');
	}

	// put_container writes a bracketed list, calling each(element,
	// depth) for the elements of r.
	template <class Range, class Each>
	void put_container(char open, char close, const Range &r, int depth, Each each)
	{
		put(open);
		if (r.empty()) {
			put(close);
			return;
		}
		bool first = true;
		for (const auto &e : r) {
			if (!first)
				put(',');
			first = false;
			newline(depth + 1);
			each(e, depth + 1);
		}
		newline(depth);
		put(close);
	}

	NOINLINE void put_array(const Array &a, int depth)
	{
		put_container('[', ']', a, depth, [this](const Value &v, int d) { write(v, d); });
	}

	NOINLINE void put_object(const Object &o, int depth)
	{
		put_container('{', '}', o, depth, [this](const Object::value_type &kv, int d) {
			put_string(kv.first);
			put(':');
			if constexpr (S::pretty)
				put(' ');
			write(kv.second, d);
		});
	}

	std::string &out_;
};

template <class S>
std::string to_string(const Value &v)
{
	std::string out;
	Printer<S>(out).print(v);
	return out;
}

// Minifier copies JSON text without the whitespace between its tokens.
template <class It>
class Minifier {
public:
	Minifier(It begin, It end) : cur_(begin), end_(end) {}

	std::string run()
	{
		std::string out;
		for (skip_ws(); cur_ != end_; skip_ws())
			token(out);
		return out;
	}

private:
	NOINLINE void skip_ws()
	{
		while (cur_ != end_ && is_ws(*cur_))
			++cur_;
	}

	NOINLINE void token(std::string &out)
	{
		if (*cur_ == '"')
			copy_string(out);
		else
			out.push_back(*cur_++);
	}

	NOINLINE void copy_string(std::string &out)
	{
		out.push_back(*cur_++);
		while (cur_ != end_) {
			char c = *cur_++;
			out.push_back(c);
			if (c == '"')
				return;
			if (c == '\\' && cur_ != end_)
				out.push_back(*cur_++);
		}
		throw ParseError("unterminated string", 0);
	}

	It cur_, end_;
};

template <class It>
NOINLINE std::string minify(It begin, It end)
{
	return Minifier<It>(begin, end).run();
}

// walk calls f(value, depth) for v and every value inside it, parents
// first.
template <class F>
NOINLINE void walk(const Value &v, F &f, int depth = 0)
{
	f(v, depth);
	if (v.is<Array>()) {
		for (const Value &e : v.as<Array>())
			walk(e, f, depth + 1);
	} else if (v.is<Object>()) {
		for (const auto &kv : v.as<Object>())
			walk(kv.second, f, depth + 1);
	}
}

// for_each_member calls f(key, value) for the members of every object
// in v.
template <class F>
NOINLINE void for_each_member(const Value &v, F &f)
{
	if (v.is<Array>()) {
		for (const Value &e : v.as<Array>())
			for_each_member(e, f);
	} else if (v.is<Object>()) {
		for (const auto &kv : v.as<Object>()) {
			f(kv.first, kv.second);
			for_each_member(kv.second, f);
		}
	}
}

// find returns the value at path (keys and array indexes separated by
// '/', as in a JSON pointer without escapes), or nullptr.
NOINLINE const Value *find(const Value &root, std::string_view path)
{
	const Value *v = &root;
	while (v && !path.empty()) {
		size_t slash = path.find('/');
		std::string_view part = path.substr(0, slash);
		path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
		if (v->is<Object>()) {
			const Object &o = v->as<Object>();
			auto it = o.find(std::string(part));
			v = it == o.end() ? nullptr : &it->second;
		} else if (v->is<Array>()) {
			size_t k = 0;
			auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), k);
			const Array &a = v->as<Array>();
			v = ec == std::errc() && end == part.data() + part.size() && k < a.size() ? &a[k] : nullptr;
		} else {
			v = nullptr;
		}
	}
	return v;
}

// Stats counts a value's nodes by kind, its characters, its arrays'
// and objects' elements, and its depth.
struct Stats {
	uint64_t counts[6] = {};
	uint64_t chars = 0, elements = 0;
	int max_depth = 0;

	NOINLINE void add(const Value &v, int depth)
	{
		counts[static_cast<int>(v.kind())]++;
		elements += v.size();
		max_depth = std::max(max_depth, depth);
		if (v.is<std::string>())
			chars += v.as<std::string>().size();
		else if (v.is<Array>())
			for (const Value &e : v.as<Array>())
				add(e, depth + 1);
		else if (v.is<Object>())
			for (const auto &kv : v.as<Object>()) {
				chars += kv.first.size();
				add(kv.second, depth + 1);
			}
	}

	NOINLINE uint64_t hash() const
	{
		uint64_t h = static_cast<uint64_t>(max_depth) * 0x100000001b3ull + chars + (elements << 32);
		for (uint64_t c : counts)
			h = (h ^ c) * 0x100000001b3ull;
		return h;
	}
};

} // namespace json

// msgpack encodes values in MessagePack and decodes them back: numbers
// that are integers in the smallest integer format that holds them,
// other numbers as float 64.
namespace msgpack {

class Encoder {
public:
	explicit Encoder(std::string &out) : out_(out) {}

	NOINLINE void encode(const json::Value &v) { v.visit(*this); }

	void operator()(std::nullptr_t) { byte(0xc0); }
	void operator()(bool b) { byte(b ? 0xc3 : 0xc2); }

	NOINLINE void operator()(double d)
	{
		if (d != std::floor(d) || std::fabs(d) >= 9e18) {
			uint64_t bits;
			std::memcpy(&bits, &d, sizeof bits);
			tagged<uint64_t>(0xcb, bits);
			return;
		}
		int64_t n = static_cast<int64_t>(d);
		if (n >= 0 && n < 128)
			byte(static_cast<uint8_t>(n));
		else if (n >= 0 && n <= UINT8_MAX)
			tagged<uint8_t>(0xcc, static_cast<uint8_t>(n));
		else if (n >= 0 && n <= UINT16_MAX)
			tagged<uint16_t>(0xcd, static_cast<uint16_t>(n));
		else if (n >= 0 && n <= UINT32_MAX)
			tagged<uint32_t>(0xce, static_cast<uint32_t>(n));
		else if (n >= 0)
			tagged<uint64_t>(0xcf, static_cast<uint64_t>(n));
		else if (n >= -32)
			byte(static_cast<uint8_t>(n));
		else if (n >= INT8_MIN)
			tagged<int8_t>(0xd0, static_cast<int8_t>(n));
		else if (n >= INT16_MIN)
			tagged<int16_t>(0xd1, static_cast<int16_t>(n));
		else if (n >= INT32_MIN)
			tagged<int32_t>(0xd2, static_cast<int32_t>(n));
		else
			tagged<int64_t>(0xd3, n);
	}

	NOINLINE void operator()(const std::string &s)
	{
		length(static_cast<uint32_t>(s.size()), 0xa0, 32, 0xd9, 0xda, 0xdb);
		out_.append(s);
	}

	NOINLINE void operator()(const json::Array &a)
	{
		length(static_cast<uint32_t>(a.size()), 0x90, 16, 0, 0xdc, 0xdd);
		for (const json::Value &e : a)
			encode(e);
	}

	NOINLINE void operator()(const json::Object &o)
	{
		length(static_cast<uint32_t>(o.size()), 0x80, 16, 0, 0xde, 0xdf);
		for (const auto &kv : o) {
			(*this)(kv.first);
			encode(kv.second);
		}
	}

private:
	NOINLINE void byte(uint8_t b) { out_.push_back(static_cast<char>(b)); }

	template <class T>
	NOINLINE void big_endian(T v)
	{
		auto u = static_cast<std::make_unsigned_t<T>>(v);
		for (int shift = 8 * (static_cast<int>(sizeof(T)) - 1); shift >= 0; shift -= 8)
			byte(static_cast<uint8_t>(u >> shift));
	}

	template <class T>
	void tagged(uint8_t tag, T v)
	{
		byte(tag);
		big_endian(v);
	}

	// length writes a string's, array's or map's header: fix | n when n <
	// limit, else the smallest of the 8 (if any), 16 and 32-bit forms.
	NOINLINE void length(uint32_t n, uint8_t fix, uint32_t limit, uint8_t tag8, uint8_t tag16, uint8_t tag32)
	{
		if (n < limit)
			byte(static_cast<uint8_t>(fix | n));
		else if (tag8 && n <= UINT8_MAX)
			tagged<uint8_t>(tag8, static_cast<uint8_t>(n));
		else if (n <= UINT16_MAX)
			tagged<uint16_t>(tag16, static_cast<uint16_t>(n));
		else
			tagged<uint32_t>(tag32, n);
	}

	std::string &out_;
};

template <class It>
class Decoder {
public:
	Decoder(It begin, It end) : cur_(begin), end_(end) {}

	NOINLINE json::Value decode()
	{
		uint8_t b = byte();
		if (b < 0x80)
			return json::Value(static_cast<double>(b));
		if (b >= 0xe0)
			return number(static_cast<int8_t>(b));
		if ((b & 0xe0) == 0xa0)
			return json::Value(str(b & 0x1f));
		if ((b & 0xf0) == 0x90)
			return array(b & 0x0f);
		if ((b & 0xf0) == 0x80)
			return map(b & 0x0f);
		switch (b) {
		case 0xc0: return json::Value();
		case 0xc2: return json::Value(false);
		case 0xc3: return json::Value(true);
		case 0xcb: {
			uint64_t bits = big_endian<uint64_t>();
			double d;
			std::memcpy(&d, &bits, sizeof d);
			return json::Value(d);
		}
		case 0xcc: return number(big_endian<uint8_t>());
		case 0xcd: return number(big_endian<uint16_t>());
		case 0xce: return number(big_endian<uint32_t>());
		case 0xcf: return number(big_endian<uint64_t>());
		case 0xd0: return number(big_endian<int8_t>());
		case 0xd1: return number(big_endian<int16_t>());
		case 0xd2: return number(big_endian<int32_t>());
		case 0xd3: return number(big_endian<int64_t>());
		case 0xd9: return json::Value(str(big_endian<uint8_t>()));
		case 0xda: return json::Value(str(big_endian<uint16_t>()));
		case 0xdb: return json::Value(str(big_endian<uint32_t>()));
		case 0xdc: return array(big_endian<uint16_t>());
		case 0xdd: return array(big_endian<uint32_t>());
		case 0xde: return map(big_endian<uint16_t>());
		case 0xdf: return map(big_endian<uint32_t>());
		}
		throw json::ParseError("bad MessagePack tag", 0);
	}

private:
	NOINLINE uint8_t byte()
	{
		if (cur_ == end_)
			throw json::ParseError("truncated MessagePack", 0);
		return static_cast<uint8_t>(*cur_++);
	}

	template <class T>
	NOINLINE T big_endian()
	{
		std::make_unsigned_t<T> u = 0;
		for (size_t k = 0; k < sizeof(T); k++)
			u = static_cast<std::make_unsigned_t<T>>(u << 8 | byte());
		return static_cast<T>(u);
	}

	template <class T>
	NOINLINE static json::Value number(T n) { return json::Value(static_cast<double>(n)); }

	NOINLINE std::string str(uint32_t n)
	{
		std::string s;
		s.reserve(n);
		while (n-- > 0)
			s.push_back(static_cast<char>(byte()));
		return s;
	}

	NOINLINE json::Value array(uint32_t n)
	{
		json::Array a;
		a.reserve(n);
		while (n-- > 0)
			a.push_back(decode());
		return json::Value(std::move(a));
	}

	NOINLINE json::Value map(uint32_t n)
	{
		json::Object o;
		while (n-- > 0) {
			json::Value key = decode();
			if (!key.is<std::string>())
				throw json::ParseError("MessagePack map key is no string", 0);
			o.emplace(std::move(key.as<std::string>()), decode());
		}
		return json::Value(std::move(o));
	}

	It cur_, end_;
};

NOINLINE std::string encode(const json::Value &v)
{
	std::string out;
	Encoder(out).encode(v);
	return out;
}

NOINLINE json::Value decode(const std::string &bytes)
{
	return Decoder<std::string::const_iterator>(bytes.cbegin(), bytes.cend()).decode();
}

} // namespace msgpack

// Lcg is the generator's random numbers: Knuth's MMIX LCG.
class Lcg {
public:
	explicit Lcg(uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 1) {}
	NOINLINE uint32_t next()
	{
		s_ = s_ * 6364136223846793005ull + 1442695040888963407ull;
		return static_cast<uint32_t>(s_ >> 33);
	}
	NOINLINE uint32_t below(uint32_t n) { return next() % n; }
	bool chance(uint32_t percent) { return below(100) < percent; }

private:
	uint64_t s_;
};

// Generator builds random documents of at most about budget values.
class Generator {
public:
	Generator(Lcg &rng, int budget) : rng_(rng), budget_(budget) {}

	// document returns an object of at least 3 members, adding members
	// until the budget is spent.
	NOINLINE json::Value document()
	{
		json::Object obj;
		while (obj.size() < 3 || budget_ > 0)
			obj.emplace(key(), value(1));
		return json::Value(std::move(obj));
	}

private:
	static constexpr int max_depth = 6;

	NOINLINE json::Value value(int depth)
	{
		budget_--;
		uint32_t r = rng_.below(100);
		if (depth < max_depth && budget_ > 0) {
			if (r < 12)
				return object(depth + 1);
			if (r < 22)
				return array(depth + 1);
		}
		if (r < 50)
			return json::Value(text());
		if (r < 80)
			return json::Value(number());
		if (r < 92)
			return json::Value(rng_.chance(50));
		return json::Value();
	}

	NOINLINE json::Value object(int depth)
	{
		json::Object obj;
		uint32_t n = rng_.below(8);
		for (uint32_t k = 0; k < n && budget_ > 0; k++)
			obj.emplace(key(), value(depth));
		return json::Value(std::move(obj));
	}

	NOINLINE json::Value array(int depth)
	{
		json::Array arr;
		uint32_t n = rng_.below(12);
		arr.reserve(n);
		for (uint32_t k = 0; k < n && budget_ > 0; k++)
			arr.push_back(value(depth));
		return json::Value(std::move(arr));
	}

	NOINLINE const char *word()
	{
		static const char *const words[] = {"id", "name", "value", "items", "price", "count", "enabled",
						    "tags", "owner", "created", "children", "data", "label",
						    "weight", "color", "path", "status", "score", "notes", "kind"};
		return words[rng_.below(sizeof words / sizeof words[0])];
	}

	NOINLINE std::string key()
	{
		std::string k = word();
		if (rng_.chance(60)) {
			k.push_back('_');
			k += word();
		}
		if (rng_.chance(30))
			k += std::to_string(rng_.below(100));
		return k;
	}

	NOINLINE std::string text()
	{
		static const uint32_t specials[] = {'\n', '\t', '"', '\\', '/', 0x01, 0xe9, 0x3b1, 0x20ac, 0x1f600};
		std::string s;
		uint32_t n = 1 + rng_.below(6);
		for (uint32_t k = 0; k < n; k++) {
			if (k)
				s.push_back(' ');
			s += word();
			if (rng_.chance(15))
				json::append_utf8(s, specials[rng_.below(sizeof specials / sizeof specials[0])]);
		}
		return s;
	}

	NOINLINE double number()
	{
		switch (rng_.below(4)) {
		case 0: return static_cast<double>(rng_.below(1000));
		case 1: return -static_cast<double>(rng_.below(100000));
		case 2: return static_cast<double>(rng_.below(1000000)) / 100.0;
		default: return static_cast<double>(rng_.below(1000)) * 1e20;
		}
	}

	Lcg &rng_;
	int budget_;
};

// Sites lists the corruptible positions of a compact document.
struct Sites {
	std::vector<size_t> colons;     // ':' between keys and values
	std::vector<size_t> structural; // {}[]:, outside strings
	std::vector<size_t> escapes;    // the character after a string's '\'
};

NOINLINE Sites find_sites(const std::string &text)
{
	Sites s;
	bool in_string = false;
	for (size_t i = 0; i < text.size(); i++) {
		char c = text[i];
		if (in_string) {
			if (c == '\\')
				s.escapes.push_back(++i);
			else if (c == '"')
				in_string = false;
		} else if (c == '"') {
			in_string = true;
		} else if (std::strchr("{}[]:,", c)) {
			s.structural.push_back(i);
			if (c == ':')
				s.colons.push_back(i);
		}
	}
	return s;
}

// corrupt breaks a compact document so that it no longer parses: no
// proper prefix of an object is valid, an object's key needs its ':',
// '@' is valid only in strings, and 'q' is no escape.
NOINLINE void corrupt(std::string &text, Lcg &rng)
{
	Sites s = find_sites(text);
	switch (rng.below(4)) {
	case 0:
		text.erase(s.colons[rng.below(static_cast<uint32_t>(s.colons.size()))], 1);
		return;
	case 1:
		text[s.structural[rng.below(static_cast<uint32_t>(s.structural.size()))]] = '@';
		return;
	case 2:
		if (!s.escapes.empty()) {
			text[s.escapes[rng.below(static_cast<uint32_t>(s.escapes.size()))]] = 'q';
			return;
		}
		break;
	}
	text.resize(rng.below(static_cast<uint32_t>(text.size())));
}

NOINLINE uint64_t fnv1a(std::string_view s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (char c : s)
		h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
	return h;
}

NOINLINE uint64_t mix(uint64_t h, uint64_t x) { return (h ^ x) * 0x100000001b3ull; }

// mismatch is returned when a document does not survive the round trip
// (never, unless the program is broken).
static const uint64_t mismatch = 0xbadbadbadull;

template <class It>
NOINLINE json::Value parse_text(It begin, It end)
{
	return json::Parser<It>(begin, end).parse_document();
}

// parse parses text from one of five kinds of input: 0 a C string, 1 the
// std::string, 2 a std::vector<char>, 3 a std::deque<char>, 4 a
// std::vector<unsigned char> (copies of the text).
NOINLINE json::Value parse(const std::string &text, int input)
{
	switch (input) {
	case 0:
		return parse_text(text.c_str(), text.c_str() + text.size());
	case 1:
		return parse_text(text.cbegin(), text.cend());
	case 2: {
		std::vector<char> buf(text.begin(), text.end());
		return parse_text(buf.cbegin(), buf.cend());
	}
	case 3: {
		std::deque<char> buf(text.begin(), text.end());
		return parse_text(buf.cbegin(), buf.cend());
	}
	default: {
		std::vector<unsigned char> bytes(text.begin(), text.end());
		return parse_text(bytes.cbegin(), bytes.cend());
	}
	}
}

// print_checked prints v in style S and returns the hash of the text,
// checking that the text minified is v printed on one line.
template <class S>
NOINLINE uint64_t print_checked(const json::Value &v)
{
	std::string text = json::to_string<S>(v);
	std::string_view view(text);
	if (json::minify(view.begin(), view.end()) != json::to_string<json::Style<0, S::ascii>>(v))
		return mismatch;
	return fnv1a(text);
}

// The analyses below are what handle_request computes on each document
// it parses, calling them through std::function.
using Analysis = std::function<uint64_t(const json::Value &)>;

NOINLINE uint64_t stats(const json::Value &v)
{
	json::Stats st;
	st.add(v, 0);
	return st.hash();
}

// sum_numbers hashes the sum of v's numbers and its true booleans.
NOINLINE uint64_t sum_numbers(const json::Value &v)
{
	double sum = 0;
	uint64_t yes = 0, bits;
	auto f = [&](const json::Value &x, int) {
		if (x.is<double>())
			sum += x.as<double>();
		else if (x.is<bool>() && x.as<bool>())
			yes++;
	};
	json::walk(v, f);
	std::memcpy(&bits, &sum, sizeof bits);
	return mix(bits, yes);
}

// top_keys hashes the five most frequent keys and their counts.
NOINLINE uint64_t top_keys(const json::Value &v)
{
	std::unordered_map<std::string, unsigned> count;
	auto f = [&](const std::string &key, const json::Value &) { count[key]++; };
	json::for_each_member(v, f);
	std::vector<std::pair<std::string, unsigned>> items(count.begin(), count.end());
	size_t n = std::min<size_t>(5, items.size());
	std::partial_sort(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(n), items.end(),
			  [](const auto &a, const auto &b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
	uint64_t h = items.size();
	for (size_t k = 0; k < n; k++)
		h = mix(mix(h, fnv1a(items[k].first)), items[k].second);
	return h;
}

// longest_strings hashes the three longest distinct strings and the
// number of distinct strings.
NOINLINE uint64_t longest_strings(const json::Value &v)
{
	std::vector<std::string_view> strs;
	auto f = [&](const json::Value &x, int) {
		if (x.is<std::string>())
			strs.push_back(x.as<std::string>());
	};
	json::walk(v, f);
	std::sort(strs.begin(), strs.end(),
		  [](std::string_view a, std::string_view b) { return a.size() != b.size() ? a.size() > b.size() : a < b; });
	strs.erase(std::unique(strs.begin(), strs.end()), strs.end());
	uint64_t h = strs.size();
	for (size_t k = 0; k < strs.size() && k < 3; k++)
		h = mix(h, fnv1a(strs[k]));
	return h;
}

// collect_paths appends to out the paths of the values below v at most
// 3 - depth levels down.
NOINLINE void collect_paths(const json::Value &v, std::string &path, std::vector<std::string> &out, int depth)
{
	if (depth > 0)
		out.push_back(path);
	if (depth == 3)
		return;
	size_t len = path.size();
	auto descend = [&](std::string_view part, const json::Value &child) {
		if (depth > 0)
			path += '/';
		path += part;
		collect_paths(child, path, out, depth + 1);
		path.resize(len);
	};
	if (v.is<json::Array>()) {
		const json::Array &a = v.as<json::Array>();
		for (size_t k = 0; k < a.size(); k++)
			descend(std::to_string(k), a[k]);
	} else if (v.is<json::Object>()) {
		for (const auto &kv : v.as<json::Object>())
			descend(kv.first, kv.second);
	}
}

// paths looks up the path of every value at most 3 levels down and
// hashes the kinds and sizes found.
NOINLINE uint64_t paths(const json::Value &v)
{
	std::vector<std::string> all;
	std::string path;
	collect_paths(v, path, all, 0);
	uint64_t h = all.size();
	for (const std::string &p : all) {
		const json::Value *x = json::find(v, p);
		h = mix(h, x ? static_cast<uint64_t>(x->kind()) << 32 | x->size() : mismatch);
	}
	return h;
}

static const Analysis analyses[] = {
    stats,
    sum_numbers,
    // values per depth and kind
    [](const json::Value &v) {
	    std::vector<uint64_t> seen;
	    auto f = [&](const json::Value &x, int depth) {
		    size_t k = static_cast<size_t>(depth) * 6 + static_cast<size_t>(x.kind());
		    if (seen.size() <= k)
			    seen.resize(k + 1);
		    seen[k]++;
	    };
	    json::walk(v, f);
	    uint64_t h = 0;
	    for (uint64_t n : seen)
		    h = mix(h, n);
	    return h;
    },
    top_keys,
    longest_strings,
    paths,
};

// budget bounds the values of each document (some 350 in practice).
static const int budget = 400;

static long parse_errors;

NOINLINE uint64_t handle_request(int i)
{
	Lcg rng(static_cast<uint64_t>(i));
	Generator gen(rng, budget);
	json::Value doc = gen.document();
	std::string text = json::to_string<json::Compact>(doc);
	if (i % 10 == 9)
		corrupt(text, rng);
	try {
		json::Value v = parse(text, (i + i / 10) % 5);
		std::string packed = msgpack::encode(v);
		if (!(v == doc) || !(msgpack::decode(packed) == v))
			return mismatch;
		uint64_t h;
		switch (i % 3) {
		case 0: h = print_checked<json::Style<2, false>>(v); break;
		case 1: h = print_checked<json::Style<4, true>>(v); break;
		default: h = print_checked<json::Style<1, false>>(v); break;
		}
		for (const Analysis &a : analyses)
			h = mix(h, a(v));
		return mix(h, fnv1a(packed));
	} catch (const json::ParseError &e) {
		parse_errors++;
		return fnv1a(e.what()) ^ 0xe7707e7707ull;
	}
}

// serve makes n requests, the i-th each time, or request k each time when
// k is not negative (every call then does the same work), and prints
// what they returned.
static void serve(int n, int k)
{
	uint64_t sum = 0;
	parse_errors = 0;
	json::is_ws_calls = 0;
	for (int i = 0; i < n; i++)
		sum += handle_request(k >= 0 ? k : i);
	printf("done %llu %ld %lu\n", static_cast<unsigned long long>(sum), parse_errors, json::is_ws_calls);
	fflush(stdout);
}

int main()
{
	printf("ready\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		int n, k;
		if (sscanf(line, "repeat %d %d", &n, &k) == 2 && k >= 0) {
			serve(n, k);
		} else if (sscanf(line, "run %d", &n) == 1) {
			serve(n, -1);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 3;
		}
	}
	return 4;
}
