package daemon

import "testing"

func TestParseBudget(t *testing.T) {
	for in, want := range map[string]float64{"10%": 0.10, "10": 0.10, " 2.5 % ": 0.025, "300%": 3, "2000": 20} {
		if got, err := ParseBudget(in); err != nil || got != want {
			t.Errorf("ParseBudget(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-5%", "ten", "10%%", "inf", "nan"} {
		if _, err := ParseBudget(in); err == nil {
			t.Errorf("ParseBudget(%q) succeeded", in)
		}
	}
}
