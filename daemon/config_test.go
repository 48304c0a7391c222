package daemon

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/bpf"
)

// TestConfigCheck checks the defaults Check fills in and the field each
// bad value is blamed on, with no command-line flag named.
func TestConfigCheck(t *testing.T) {
	good := Config{PID: 1, Roots: []string{"main"}}
	cfg, err := good.Check()
	if err != nil {
		t.Fatal(err)
	}
	want := good
	want.Budget, want.SampleHz, want.RingBytes = DefaultBudget, DefaultSampleHz, bpf.DefaultRingBytes
	want.MaxFunctions, want.MaxNodes, want.CheckInterval, want.AllocRate = DefaultMaxFunctions, DefaultMaxNodes, DefaultCheckInterval, DefaultAllocRate
	if cfg.Budget != want.Budget || cfg.SampleHz != want.SampleHz || cfg.RingBytes != want.RingBytes || cfg.MaxFunctions != want.MaxFunctions ||
		cfg.MaxNodes != want.MaxNodes || cfg.CheckInterval != want.CheckInterval || cfg.AllocRate != want.AllocRate {
		t.Errorf("defaults %+v, want %+v", cfg, want)
	}
	// Values given, and the negative ones that mean no bound, stay.
	given := good
	given.Budget, given.SampleHz, given.RingBytes, given.MaxFunctions, given.MaxNodes, given.CheckInterval = 0.3, 4999, 1<<20, -1, -1, -time.Second
	if cfg, err := given.Check(); err != nil || cfg.Budget != 0.3 || cfg.SampleHz != 4999 || cfg.RingBytes != 1<<20 || cfg.MaxFunctions != -1 ||
		cfg.MaxNodes != -1 || cfg.CheckInterval != -time.Second {
		t.Errorf("given values: %+v, %v", cfg, err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"PID", func(c *Config) { c.PID = 0 }},
		{"Roots", func(c *Config) { c.Roots = nil }},
		{"Mode", func(c *Config) { c.Mode = ModeSample + 1 }},
		{"Budget", func(c *Config) { c.Budget = -0.1 }},
		{"Budget", func(c *Config) { c.Budget = math.Inf(1) }},
		{"SampleHz", func(c *Config) { c.SampleHz = MaxSampleHz + 1 }},
		{"SampleHz", func(c *Config) { c.SampleHz = -1 }},
		{"RingBytes", func(c *Config) { c.RingBytes = 3 << 20 }},
		{"RingBytes", func(c *Config) { c.RingBytes = 64 }},
	} {
		c := good
		tc.edit(&c)
		_, err := c.Check()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || strings.Contains(err.Error(), "--") {
			t.Errorf("%s: error %v, want a ConfigError of %s naming no flag", tc.field, err, tc.field)
		}
	}
}
