# driver.py: a driver of Debian's python3.11 (the interpreter kprofd's
# authors did not write) for kprofd's benchmarks of counts in the default
# mode.
#
# Run: PYTHONHASHSEED=0 python3.11 driver.py (a fixed hash seed makes the
# interpreter's dictionary and set probes the same from run to run).
#
# Protocol on stdin/stdout: it prints "ready", then for each line
#   run N   makes N calls of work, through map (C code calls it: the
#           interpreter's _PyFunction_Vectorcall runs once per call, the
#           root); prints "done HASH", HASH the last call's result (the
#           same for every call)
#   exit    exits with status 3
# and at end of input exits with status 4.
#
# Every call of work does the same work on data made at start from a
# seeded generator: it formats records as CSV and parses them back,
# matches and substitutes regular expressions, sorts and groups records,
# pickles and unpickles them, compresses the pickle, checksums it, and runs
# a small class hierarchy over a heap. Nothing carries over between calls
# but the result.

import bisect
import csv
import heapq
import io
import pickle
import random
import re
import sys
import zlib

rng = random.Random(20240611)
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
         "iota", "kappa", "lambda", "mu", "nu", "xi", "omicron", "pi"]
RECORDS = [
    {"id": i, "name": " ".join(rng.choice(WORDS) for _ in range(3)),
     "score": rng.randint(0, 100000) / 100, "tags": [rng.choice(WORDS) for _ in range(rng.randint(0, 4))],
     "email": "%s.%s@example.org" % (rng.choice(WORDS), i)}
    for i in range(120)
]
TEXT = " ".join("%s-%d (%s)" % (rng.choice(WORDS), rng.randint(0, 999), rng.choice(WORDS)) for _ in range(400))
EMAIL = re.compile(r"([a-z]+)\.(\d+)@example\.org")
TOKEN = re.compile(r"([a-z]+)-(\d+) \(([a-z]+)\)")


class Shape:
    def __init__(self, size):
        self.size = size

    def area(self):
        raise NotImplementedError

    def __lt__(self, other):
        return self.area() < other.area()


class Square(Shape):
    def area(self):
        return self.size * self.size


class Circle(Shape):
    def area(self):
        return 3.14159 * self.size * self.size


def as_csv(records):
    out = io.StringIO()
    w = csv.writer(out)
    for r in records:
        w.writerow([r["id"], r["name"], r["score"], ";".join(r["tags"]), r["email"]])
    return out.getvalue()


def from_csv(text):
    rows = []
    for row in csv.reader(io.StringIO(text)):
        rows.append({"id": int(row[0]), "name": row[1], "score": float(row[2]),
                     "tags": row[3].split(";") if row[3] else [], "email": row[4]})
    return rows


def tokens(text):
    counts = {}
    for word, number, tag in TOKEN.findall(text):
        counts[word] = counts.get(word, 0) + int(number) + len(tag)
    return counts


def shapes(records):
    heap = []
    for r in records:
        s = Square(r["id"] % 7 + 1) if r["id"] % 2 else Circle(r["id"] % 5 + 1)
        heapq.heappush(heap, s)
    total = 0.0
    while heap:
        total += heapq.heappop(heap).area()
    return total


def work(_):
    rows = from_csv(as_csv(RECORDS))
    h = len(rows)
    for r in rows:
        m = EMAIL.match(r["email"])
        h = (h * 31 + int(m.group(2)) + len(m.group(1))) & 0xFFFFFFFF
    ranked = sorted(rows, key=lambda r: (-r["score"], r["id"]))
    groups = {}
    for r in ranked:
        for t in r["tags"]:
            groups.setdefault(t, []).append(r["id"])
    cuts = [r["score"] for r in ranked][::-1]
    h ^= bisect.bisect_left(cuts, 500.0)
    counts = tokens(TEXT)
    text = TOKEN.sub(lambda m: m.group(3).upper(), TEXT[:2000])
    blob = pickle.dumps((ranked, groups, counts))
    packed = zlib.compress(blob)
    if pickle.loads(zlib.decompress(packed)) != (ranked, groups, counts):
        return -1
    digest = "%08x" % zlib.crc32(packed)
    area = shapes(rows)
    return (h + len(text) + int(area) + int(digest[:8], 16) + len(groups)) & 0xFFFFFFFF


def main():
    print("ready", flush=True)
    for line in sys.stdin:
        if line.startswith("run "):
            h = 0
            for h in map(work, range(int(line[4:]))):
                pass
            print("done %d" % h, flush=True)
        elif line.startswith("exit"):
            sys.exit(3)
    sys.exit(4)


main()
