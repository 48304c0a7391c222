// hotroot: a root too hot to probe, for kprofd's tests. parse_doc parses
// one small document per call, some hundred thousand calls a second, so
// its own entry and exit probes cost more than any budget; parse_batch,
// which calls it for a batch of batchSize documents, is called that many
// times less often.
//
// Build: g++ -O2 -g -o hotroot hotroot.cc
//
// Protocol on stdin/stdout: prints "ready"; "run N" parses N documents,
// in batches of batchSize (the last one shorter), and prints "done S" (a
// sum of what parse_doc returned); "exit" exits 0.

#include <cstdio>
#include <cstring>
#include <string>

#define NOINLINE __attribute__((noinline))

namespace doc {

constexpr int batchSize = 1000;

// A cursor over one document's characters.
template <typename Char>
struct Cursor {
	const Char *p, *end;
	bool done() const { return p >= end; }
	Char peek() const { return *p; }
};

template <typename Char>
NOINLINE bool is_space(Char c)
{
	return c == ' ' || c == ',' || c == '\n';
}

template <typename Int, typename Char>
NOINLINE Int scan_number(Cursor<Char> &c)
{
	Int v = 0;
	while (!c.done() && c.peek() >= '0' && c.peek() <= '9')
		v = v * 10 + (*c.p++ - '0');
	return v;
}

template <typename Char>
NOINLINE unsigned long scan_word(Cursor<Char> &c)
{
	unsigned long h = 1469598103934665603UL;
	while (!c.done() && !is_space(c.peek()))
		h = (h ^ (unsigned char)*c.p++) * 1099511628211UL;
	return h;
}

// parse_doc: the root. Numbers add up, words hash.
NOINLINE long parse_doc(const std::string &text)
{
	Cursor<char> c{text.data(), text.data() + text.size()};
	long sum = 0;
	while (!c.done()) {
		char ch = c.peek();
		if (is_space(ch))
			c.p++;
		else if (ch >= '0' && ch <= '9')
			sum += scan_number<long>(c);
		else
			sum ^= (long)(scan_word(c) & 0xffff);
	}
	return sum;
}

// parse_batch parses n documents, from the first'th of docs on.
NOINLINE long parse_batch(const std::string *docs, int ndocs, long first, int n)
{
	long sum = 0;
	for (int i = 0; i < n; i++)
		sum += parse_doc(docs[(first + i) % ndocs]);
	return sum;
}

} // namespace doc

int main()
{
	static const char *const records[] = {
		"id 17, name alpha, size 4096, tags red green blue, 12 34 56\n",
		"id 18, name beta, size 512, tags cyan, 7 8 9 10 11 12\n",
		"id 19, name gamma delta, size 65536, tags none, 1 2 3\n",
		"id 20, name epsilon, size 8, tags magenta yellow, 100 200 300 400\n",
	};
	// Four documents of a few records each: some microseconds a call.
	const int ndocs = 4;
	std::string docs[ndocs];
	for (int d = 0; d < ndocs; d++)
		for (int r = 0; r < 12 + 4 * d; r++)
			docs[d] += records[(d + r) % 4];
	char line[64];
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	long done = 0;
	while (fgets(line, sizeof line, stdin)) {
		long n;
		if (sscanf(line, "run %ld", &n) == 1) {
			long sum = 0;
			for (long i = 0; i < n; i += doc::batchSize) {
				int m = (int)(n - i < doc::batchSize ? n - i : doc::batchSize);
				sum += doc::parse_batch(docs, ndocs, done + i, m);
			}
			done += n;
			printf("done %ld\n", sum);
		} else if (strncmp(line, "exit", 4) == 0)
			return 0;
	}
	return 0;
}
