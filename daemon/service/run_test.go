package service

import (
	"errors"
	"strings"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/cct"
)

// TestOutcomeErr checks what an ended session reports as its error: an
// empty profile is one, and says why, including when the root ran only
// before a predicting session attached below it.
func TestOutcomeErr(t *testing.T) {
	stopErr := errors.New("detaching: busy")
	roots := []string{"handle_request"}
	for _, tc := range []struct {
		what  string
		o     Outcome
		wants []string // substrings of the error; none: no error
	}{
		{"a profile", Outcome{Profile: &cct.Profile{}, Final: daemon.Progress{RootEntered: true}}, nil},
		{"a profile, a stop error", Outcome{Profile: &cct.Profile{}, Final: daemon.Progress{RootEntered: true}, StopErr: stopErr},
			[]string{"detaching: busy"}},
		{"never called", Outcome{Profile: &cct.Profile{}, Final: daemon.Progress{OutsideHits: 7}},
			[]string{"no thread was inside handle_request during the session: 7 probe hits outside it"}},
		{"called before the attach only", Outcome{Profile: &cct.Profile{}, Final: daemon.Progress{CallsBefore: 12}, StopErr: stopErr},
			[]string{"handle_request ran 12 times, all before the probes below it went in", "--predict=false", "detaching: busy"}},
	} {
		err := tc.o.Err(roots)
		if len(tc.wants) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want no error", tc.what, err)
			}
			continue
		}
		for _, want := range tc.wants {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want %q in it", tc.what, err, want)
			}
		}
	}
}
