// A C++ target: namespaces, overloads, templates, a throwing function with a
// cold part, and main with a landing pad.
//
// Built by the tests with: g++ -O2 -o cppprog cpp.cc
#include <cstdio>
#include <stdexcept>

namespace ns {

struct Handler {
	int base;
	int handle();
	int handle(int x);
};

__attribute__((noipa)) int Handler::handle() { return base * 3; }
__attribute__((noipa)) int Handler::handle(int x) { return base + x; }

template <typename T> __attribute__((noipa)) T twice(T v) { return v + v; }

template <typename T> struct Box {
	T v;
	__attribute__((noipa)) T get() const { return v * 2; }
};

} // namespace ns

__attribute__((noipa)) int serve(int n) {
	if (n < 0)
		throw std::invalid_argument("negative");
	ns::Handler h{n};
	return h.handle() + h.handle(n);
}

int main(int argc, char **argv) {
	volatile int n = argc;
	ns::Box<double> b{1.5};
	try {
		std::printf("%d %d %g\n", serve(n), ns::twice(int(n)), b.get());
	} catch (const std::exception &e) {
		std::puts(e.what());
		return 1;
	}
	return 0;
}
