//go:build integration

package bpf

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
)

// verifierStats matches the summary the verifier's log ends with at
// LogLevelStats: its time and the instructions it went through.
var (
	verifyTime  = regexp.MustCompile(`verification time (\d+) usec`)
	verifyInsns = regexp.MustCompile(`processed (\d+) insns`)
)

// BenchmarkVerifier loads each of the probe programs alone, configured as
// a hybrid session on a C target (c) or a Go target (go) configures them,
// and reports what the kernel's verifier spent on it (verify-us: its own
// count, at LogLevelStats) and the instructions it went through (insns),
// and the wall time of loading the collection a session loads (load-ms).
//
//	go test -tags integration -run '^$' -bench Verifier -count 3 ./bpf
func BenchmarkVerifier(b *testing.B) {
	if err := rlimit.RemoveMemlock(); err != nil {
		b.Fatal(err)
	}
	for _, target := range []struct {
		name string
		cfg  Config
	}{
		{"c", Config{PID: os.Getpid(), Funcs: 5000, Sampling: true, Sites: 1 << 14, SeedThreads: true, CheckInterval: 100 * time.Millisecond}},
		{"go", Config{PID: os.Getpid(), Funcs: 5000, Sampling: true, Sites: 1 << 14, SeedThreads: true, CheckInterval: 100 * time.Millisecond,
			Go: &GoLayout{GTLS: -8, GoidOff: 152, StackHiOff: 8}}},
	} {
		b.Run(target.name, func(b *testing.B) {
			spec := configuredSpec(b, target.cfg)
			names := make([]string, 0, len(spec.Programs))
			for name := range spec.Programs {
				names = append(names, name)
			}
			slices.Sort(names)
			for b.Loop() {
				for _, name := range names {
					us, insns := verifyOne(b, spec, name)
					b.ReportMetric(float64(us), "verify-us/"+name)
					b.ReportMetric(float64(insns), "insns/"+name)
				}
				start := time.Now()
				p, err := Load(target.cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "load-ms")
				p.Close()
			}
		})
	}
}

// configuredSpec returns the probe programs' spec configured for cfg.
func configuredSpec(b *testing.B, cfg Config) *ebpf.CollectionSpec {
	spec, err := loadKprofd()
	if err != nil {
		b.Fatal(err)
	}
	cfg.RingBytes, cfg.WakeupBytes = DefaultRingBytes, DefaultWakeupBytes
	stripes, stride, err := callsLayout(cfg.Funcs)
	if err != nil {
		b.Fatal(err)
	}
	if err := configure(spec, cfg, stripes, stride); err != nil {
		b.Fatal(err)
	}
	return spec
}

// verifyOne loads program name of spec alone, with the maps it uses, and
// returns the verifier's time in µs and the instructions it processed.
func verifyOne(b *testing.B, spec *ebpf.CollectionSpec, name string) (int, int) {
	one := spec.Copy()
	for other := range one.Programs {
		if other != name {
			delete(one.Programs, other)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}})
	if err != nil {
		b.Fatalf("loading %s: %v", name, err)
	}
	defer coll.Close()
	log := coll.Programs[name].VerifierLog
	return atoiMatch(b, verifyTime, log, name), atoiMatch(b, verifyInsns, log, name)
}

func atoiMatch(b *testing.B, re *regexp.Regexp, log, name string) int {
	m := re.FindStringSubmatch(log)
	if m == nil {
		b.Fatalf("%s: no %q in the verifier's log:\n%s", name, re, log)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		b.Fatal(fmt.Errorf("%s: %w", name, err))
	}
	return n
}
