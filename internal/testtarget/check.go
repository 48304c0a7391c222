package testtarget

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/google/pprof/profile"
)

// PprofCounts sums the first sample value (calls) of every calling context
// of a parsed profile, keyed by function names from the root down joined
// by ";". rename, when not nil, maps function names first; a name it maps
// to "" is dropped from the path, and a context whose own function is
// dropped is left out (so that, say, only a program's own functions are
// compared, whatever runtime functions they call or are called by).
func PprofCounts(p *profile.Profile, rename func(string) string) map[string]uint64 {
	counts := map[string]uint64{}
	for _, s := range p.Sample {
		var names []string // innermost first
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				name := line.Function.Name
				if rename != nil {
					name = rename(name)
				}
				names = append(names, name)
			}
		}
		if len(names) == 0 || names[0] == "" {
			continue
		}
		names = slices.DeleteFunc(names, func(n string) bool { return n == "" })
		slices.Reverse(names)
		counts[strings.Join(names, ";")] += uint64(s.Value[0])
	}
	return counts
}

// SampleContext names a parsed profile's sample by its calling context:
// function names from the root down, joined by ";".
func SampleContext(s *profile.Sample) string {
	names := make([]string, 0, len(s.Location))
	for i := len(s.Location) - 1; i >= 0; i-- {
		names = append(names, s.Location[i].Line[0].Function.Name)
	}
	return strings.Join(names, ";")
}

// DiffCounts describes how got differs from want, "" when equal.
func DiffCounts(got, want map[string]uint64) string {
	var keys []string
	seen := map[string]bool{}
	for k := range want {
		keys, seen[k] = append(keys, k), true
	}
	for k := range got {
		if !seen[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !wok:
			fmt.Fprintf(&b, "  unexpected context %s: %d calls\n", k, g)
		case !gok:
			fmt.Fprintf(&b, "  missing context %s: want %d calls\n", k, w)
		case g != w:
			fmt.Fprintf(&b, "  %s: %d calls, want %d\n", k, g, w)
		}
	}
	return b.String()
}

// TextDiff compares the executable file mappings of a process with the
// files they map and returns the first difference, "" when none. Uprobes
// write breakpoints into the process's copy of the code, so a difference
// means a probe is still installed.
func TextDiff(pid int) (string, error) {
	maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return "", err
	}
	defer maps.Close()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return "", err
	}
	defer mem.Close()
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] != "r-xp" || !strings.HasPrefix(f[5], "/") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		end, _ := strconv.ParseUint(hi, 16, 64)
		off, _ := strconv.ParseUint(f[2], 16, 64)
		// map_files names drop the leading zeros maps shows (00400000).
		file, err := os.ReadFile(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, start, end))
		if err != nil {
			return "", err
		}
		n := end - start
		if off+n > uint64(len(file)) {
			n = uint64(len(file)) - off
		}
		live := make([]byte, n)
		if _, err := mem.ReadAt(live, int64(start)); err != nil {
			return "", fmt.Errorf("reading %s at %#x: %w", f[5], start, err)
		}
		want := file[off : off+n]
		if !bytes.Equal(live, want) {
			for i := range live {
				if live[i] != want[i] {
					return fmt.Sprintf("%s at %#x (file offset %#x): byte %#02x in memory, %#02x in the file",
						f[5], start+uint64(i), off+uint64(i), live[i], want[i]), nil
				}
			}
		}
	}
	return "", sc.Err()
}

// CheckNoProbes fails the test if any uprobe is still installed in pid.
func CheckNoProbes(t testing.TB, pid int) {
	t.Helper()
	diff, err := TextDiff(pid)
	if err != nil {
		t.Fatalf("comparing pid %d's code with its files: %v", pid, err)
	}
	if diff != "" {
		t.Errorf("a probe is still installed in pid %d: %s", pid, diff)
	}
}

// CheckNoProbesSoon is CheckNoProbes for kprofd commands, which exit once
// their files are written and leave the probes still in then to `kprofd
// detach-probes` (kprofd serve: to a goroutine): it gives the kernel a
// few seconds to take them out, as CheckGone does.
func CheckNoProbesSoon(t testing.TB, pid int) {
	t.Helper()
	var diff string
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if diff, err = TextDiff(pid); err != nil || diff == "" || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("comparing pid %d's code with its files: %v", pid, err)
	}
	if diff != "" {
		t.Errorf("a probe is still installed in pid %d 5s after kprofd: %s", pid, diff)
	}
}

// CheckGone proves that BPF programs and links no longer exist in the
// kernel. The kernel frees a uprobe_multi link's program after an RCU
// grace period, so it gives them a few seconds.
func CheckGone(t testing.TB, progs []ebpf.ProgramID, links []link.ID) {
	t.Helper()
	if len(progs) == 0 || len(links) == 0 {
		t.Fatalf("nothing to check: %d programs and %d links", len(progs), len(links))
	}
	checkGone(t, progs, links)
}

// CheckLinksGone proves that BPF links no longer exist in the kernel,
// giving them a few seconds.
func CheckLinksGone(t testing.TB, links []link.ID) {
	t.Helper()
	if len(links) == 0 {
		t.Fatal("no links to check")
	}
	checkGone(t, nil, links)
}

func checkGone(t testing.TB, progs []ebpf.ProgramID, links []link.ID) {
	t.Helper()
	var alive []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		alive = alive[:0]
		for _, id := range progs {
			if p, err := ebpf.NewProgramFromID(id); err == nil {
				p.Close()
				alive = append(alive, fmt.Sprintf("program %d", id))
			}
		}
		for _, id := range links {
			if l, err := link.NewFromID(id); err == nil {
				l.Close()
				alive = append(alive, fmt.Sprintf("link %d", id))
			}
		}
		if len(alive) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(alive) > 0 {
		t.Errorf("still in the kernel 5s after detaching: %v", alive)
	}
}

// Probed reports whether the instruction at run-time address addr of pid,
// which is at offset off of the file at path, differs in memory from the
// file: whether a uprobe is installed there.
func Probed(pid int, path string, off, addr uint64) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return false, err
	}
	defer mem.Close()
	var want, live [1]byte
	if _, err := f.ReadAt(want[:], int64(off)); err != nil {
		return false, err
	}
	if _, err := mem.ReadAt(live[:], int64(addr)); err != nil {
		return false, fmt.Errorf("reading pid %d at %#x: %w", pid, addr, err)
	}
	return live != want, nil
}
