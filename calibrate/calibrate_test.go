package calibrate

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/internal/wire"
	"github.com/kprofd/kprofd/internal/x86"
)

func TestSummarise(t *testing.T) {
	got := summarise([]float64{5, 1, 9, 3, 7, 2, 8, 4, 6, 10, 11})
	if want := (Stat{Min: 1, P10: 2, Median: 6, P90: 10, Mean: 6}); got != want {
		t.Errorf("summarise = %+v, want %+v", got, want)
	}
}

// TestComputeMeasurement feeds a synthetic stream: every call has an
// entry at 1000*i, an exit 300 ns later (inner 300), the next entry 1000 ns
// after the last (total 1000, minus a base of 2), and one flush of 50 ns
// lands in the fourth call's inner interval and one of 70 ns after its
// exit.
func TestComputeMeasurement(t *testing.T) {
	const calls, batch = 9, 4
	var events []wire.Event
	events = append(events, wire.Event{Func: idLoop, Kind: wire.KindEntry})
	for i := range calls {
		e := wire.Event{Time: uint64(1000 * i), Func: idLeaf, Kind: wire.KindEntry}
		x := wire.Event{Time: uint64(1000*i + 300), Func: idLeaf, Kind: wire.KindReturn}
		if i == 3 {
			e.Adjust, x.Adjust = 50, 70
			x.Time += 50
		}
		events = append(events, e, x)
	}
	// Calls after the fourth are pushed back by the two flushes.
	for i := range events {
		if events[i].Func == idLeaf && events[i].Time >= 4000 {
			events[i].Time += 120
		}
	}
	events = append(events, wire.Event{Func: idLoop, Kind: wire.KindExit})

	m, err := computeMeasurement(Pair{x86.ClassEmulated, ExitUretprobe}, events, calls, batch, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := Measurement{
		Pair:  Pair{x86.ClassEmulated, ExitUretprobe},
		Inner: Stat{Min: 300, P10: 300, Median: 300, P90: 300, Mean: 300},
		Outer: Stat{Min: 698, P10: 698, Median: 698, P90: 698, Mean: 698},
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got %+v\nwant %+v", m, want)
	}

	if _, err := computeMeasurement(Pair{x86.ClassEmulated, ExitRet}, events, calls, batch, 2); err == nil {
		t.Error("accepted uretprobe events for a ret-site pair")
	}
	if _, err := computeMeasurement(Pair{x86.ClassEmulated, ExitUretprobe}, events[:7], calls, batch, 2); err == nil {
		t.Error("accepted a stream with calls missing")
	}
}

func TestResultJSON(t *testing.T) {
	r := &Result{
		Key:  Key{Kernel: "6.18", CPU: "AMD EPYC", Binary: "0123456789abcdef"},
		Time: time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC), Batches: 2, BatchSize: 100,
		Measurements: []Measurement{{Pair: Pair{x86.ClassStepped, ExitRet}, Inner: Stat{Min: 0.5, P10: 0.6, P90: 1.4, Mean: 1}, Outer: Stat{Min: 1.5, P10: 1.5, P90: 3.5, Mean: 2}}},
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"Entry": "stepped"`)) || !bytes.Contains(buf.Bytes(), []byte(`"Exit": "ret"`)) {
		t.Errorf("classes not written by name:\n%s", buf.Bytes())
	}
	var back Result
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, r) {
		t.Errorf("round trip: got %+v, want %+v", back, *r)
	}
	c, ok := back.Costs(Pair{x86.ClassStepped, ExitRet})
	if !ok || c.Inner != 1 || c.Outer != 2 || math.Abs(c.InnerErr-0.4) > 1e-12 || c.OuterErr != 1 {
		t.Errorf("Costs = %+v, %v", c, ok)
	}
	if _, ok := back.Costs(Pair{x86.ClassEmulated, ExitRet}); ok {
		t.Error("Costs found a pair that was not measured")
	}
}

// TestDrift: two checks a session made before and after it tell a change
// of the machine's speed only past their spreads and a fifth.
func TestDrift(t *testing.T) {
	check := func(inner, outer, spread float64) *Result {
		st := func(mean float64) Stat { return Stat{Mean: mean, P10: mean - spread, P90: mean + spread} }
		return &Result{Measurements: []Measurement{{Pair: Check.Pairs[0], Inner: st(inner), Outer: st(outer)}}}
	}
	for _, tc := range []struct {
		name          string
		before, after *Result
		drift         bool
	}{
		{"same", check(300, 500, 20), check(310, 490, 20), false},
		{"within a fifth and the spreads", check(300, 500, 20), check(380, 560, 20), false},
		{"slower", check(300, 500, 20), check(600, 1000, 20), true},
		{"faster", check(600, 1000, 20), check(300, 500, 20), true},
		{"spread wide", check(300, 500, 300), check(600, 1000, 300), false},
		{"no check after", check(300, 500, 20), nil, false},
	} {
		text, ok := Drift(tc.before, tc.after)
		if ok != tc.drift || ok != (text != "") {
			t.Errorf("%s: %q, %v; want drift %v", tc.name, text, ok, tc.drift)
		}
	}
}

// TestGoBuildID reads the Go build id of this test's binary, which keys
// the calibrations of the binary it is in, and compares it with what the
// go tool reads.
func TestGoBuildID(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Fatalf("go tool buildid: %v", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := goBuildID(f); string(got) != strings.TrimSpace(string(want)) {
		t.Errorf("goBuildID = %q, go tool buildid says %q", got, want)
	}
	k1, err1 := ThisMachine()
	k2, err2 := ThisMachine()
	if err1 != nil || err2 != nil || k1 != k2 || len(k1.Binary) != 16 {
		t.Errorf("ThisMachine = %+v, %v then %+v, %v", k1, err1, k2, err2)
	}
}
