//go:build integration

package daemon_test

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/kprofd/kprofd/daemon"
	"github.com/kprofd/kprofd/internal/export"
	"github.com/kprofd/kprofd/internal/testtarget"
)

func TestHybridExplore(t *testing.T) {
	requireRoot(t)
	exe := testtarget.BuildHybrid(t)
	target := testtarget.Start(t, exe)
	s, err := daemon.Start(daemon.Config{PID: target.Pid(), Roots: []string{"handle_request"}, Mode: daemon.ModeHybrid,
		Exclude: []*regexp.Regexp{regexp.MustCompile(`:untraced$`)}, Warnf: t.Logf,
		Demoted: func(d daemon.Demotion) { t.Logf("demoted %s (detach %v)", d, d.Detach) }})
	if err != nil {
		t.Fatal(err)
	}
	line := target.Run(t, testtarget.HybridRequests)
	p, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	t.Log(line)
	var buf bytes.Buffer
	export.WriteTree(&buf, p, export.TreeOptions{})
	t.Log(buf.String())
}
